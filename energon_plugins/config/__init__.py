"""The datamodule configuration: model, loading, validation, JSON Schema and building.

Import-light: loading, validating and the schema import no torch, transformers or Energon;
:func:`build_datamodule` imports them when it builds.
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


def build_datamodule(config_or_path, **overrides):  # noqa: ANN001, ANN201 - documented below
    """Build an ``EnergonMultiModalDataModule``; see :func:`energon_plugins.config.build.build_datamodule`."""
    from energon_plugins.config.build import build_datamodule as _build

    return _build(config_or_path, **overrides)


__all__ = [
    "ConfigIssue",
    "ConfigValidationError",
    "DataModuleConfig",
    "apply_overrides",
    "build_datamodule",
    "check_config",
    "load_config",
    "parse_config_text",
    "read_config_file",
    "validate_config",
]
