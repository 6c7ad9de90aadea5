"""energon-plugins: a plugin registry for Megatron-Energon task encoders.

Light names (the registry, hook markers, configs, errors) import eagerly and cost no torch,
transformers or Energon import. The datamodule, the loader and the task-encoder base classes
load on first access.
"""

from typing import TYPE_CHECKING

from energon_plugins._lazy import lazy_attributes

from energon_plugins._markers import ENTRY_POINT_GROUP, hookimpl, hookspec
from energon_plugins.api import available, create, resolve
from energon_plugins.context import BuildContext
from energon_plugins.errors import (
    ConfigError,
    DatasetError,
    EnergonPluginsError,
    PluginConflictError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionsError,
)
from energon_plugins.kinds import IMAGE_PROCESSOR, KINDS, PACKING_STRATEGY, TASK_ENCODER
from energon_plugins.manager import (
    get_registry,
    isolated_registry,
    load_registry,
    reset_registry,
    use_registry,
)
from energon_plugins.registry import LoadFailure, PluginInfo, PluginSpec, Registry

__version__ = "0.1.0"

# Heavy names: attribute -> module that defines it, imported on first access.
_LAZY = {
    "ConversationTemplate": "energon_plugins.sample_config",
    "MultiModalSampleConfig": "energon_plugins.sample_config",
    "EnergonMultiModalDataModule": "energon_plugins.datamodule",
    "EnergonDataloader": "energon_plugins.dataloader",
    "cyclic_iter": "energon_plugins.dataloader",
    "FiniteDataloader": "energon_plugins.dataloader",
    "PluginTaskEncoder": "energon_plugins.task_encoders.base",
    "EncodedSample": "energon_plugins.samples",
    "MultiModalBatch": "energon_plugins.samples",
}

if TYPE_CHECKING:  # pragma: no cover
    from energon_plugins.dataloader import EnergonDataloader, FiniteDataloader, cyclic_iter
    from energon_plugins.datamodule import EnergonMultiModalDataModule
    from energon_plugins.sample_config import ConversationTemplate, MultiModalSampleConfig
    from energon_plugins.samples import EncodedSample, MultiModalBatch
    from energon_plugins.task_encoders.base import PluginTaskEncoder


__getattr__, __dir__ = lazy_attributes("energon_plugins", globals(), _LAZY)


__all__ = [
    "ENTRY_POINT_GROUP",
    "IMAGE_PROCESSOR",
    "KINDS",
    "PACKING_STRATEGY",
    "TASK_ENCODER",
    "BuildContext",
    "ConfigError",
    "ConversationTemplate",
    "DatasetError",
    "EncodedSample",
    "EnergonDataloader",
    "EnergonMultiModalDataModule",
    "EnergonPluginsError",
    "FiniteDataloader",
    "LoadFailure",
    "MultiModalBatch",
    "MultiModalSampleConfig",
    "PluginConflictError",
    "PluginInfo",
    "PluginLoadError",
    "PluginNotFoundError",
    "PluginOptionsError",
    "PluginSpec",
    "PluginTaskEncoder",
    "Registry",
    "__version__",
    "available",
    "create",
    "cyclic_iter",
    "get_registry",
    "hookimpl",
    "hookspec",
    "isolated_registry",
    "load_registry",
    "reset_registry",
    "resolve",
    "use_registry",
]
