"""The datamodule configuration: the layer below loading.

The config model and its settings (:mod:`~energon_plugins.config.settings`), reading and
overriding config files, validation (every issue with its dotted path), the JSON Schema, the
checks of Energon arguments and of a dataset folder. Import-light: nothing here imports torch,
transformers or Energon, and nothing imports :mod:`energon_plugins.loading`; building a
datamodule from a config is :func:`energon_plugins.build_datamodule` (in
:mod:`energon_plugins.loading.build`).
"""

from energon_plugins.config.load import load_config, parse_config_text, read_config_file
from energon_plugins.config.model import DataModuleConfig
from energon_plugins.config.overrides import apply_overrides
from energon_plugins.config.validate import (
    ConfigIssue,
    ConfigValidationError,
    check_config,
    validate_config,
)

__all__ = [
    "ConfigIssue",
    "ConfigValidationError",
    "DataModuleConfig",
    "apply_overrides",
    "check_config",
    "load_config",
    "parse_config_text",
    "read_config_file",
    "validate_config",
]
