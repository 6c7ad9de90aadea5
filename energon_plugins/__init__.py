"""energon-plugins: a plugin registry for Megatron-Energon task encoders.

Light names (the registry, hook markers, configs, errors) import eagerly and cost no torch,
transformers or Energon import. The datamodule, the loader and the task-encoder base classes
load on first access.
"""

from typing import TYPE_CHECKING

from energon_plugins._lazy import lazy_attributes

from energon_plugins.host._markers import ENTRY_POINT_GROUP, hookimpl, hookspec
from energon_plugins.host.api import available, create, resolve
from energon_plugins.host.context import BuildContext
from energon_plugins.errors import (
    BatchFormatError,
    ConfigError,
    DatasetError,
    EnergonPluginsError,
    PluginConflictError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionsError,
)
from energon_plugins.host.kinds import (
    BATCH_FORMAT,
    IMAGE_PROCESSOR,
    KINDS,
    PACKING_STRATEGY,
    TASK_ENCODER,
)
from energon_plugins.host.manager import (
    get_registry,
    isolated_registry,
    load_registry,
    reset_registry,
    use_registry,
)
from energon_plugins.host.registry import LoadFailure, PluginInfo, PluginSpec, Registry

__version__ = "0.1.0"

# Heavy names: attribute -> module that defines it, imported on first access.
_LAZY = {
    "ConversationTemplate": "energon_plugins.encoding.sample_config",
    "MultiModalSampleConfig": "energon_plugins.encoding.sample_config",
    "EnergonMultiModalDataModule": "energon_plugins.loading.datamodule",
    "EnergonDataloader": "energon_plugins.loading.dataloader",
    "cyclic_iter": "energon_plugins.loading.dataloader",
    "FiniteDataloader": "energon_plugins.loading.dataloader",
    "PluginTaskEncoder": "energon_plugins.encoding.task_encoders.base",
    "EncodedSample": "energon_plugins.encoding.samples",
    "MultiModalBatch": "energon_plugins.encoding.samples",
    "BatchFormat": "energon_plugins.encoding.batch_formats.base",
    "VisualInputs": "energon_plugins.encoding.batch_formats.visual_inputs",
}

if TYPE_CHECKING:  # pragma: no cover
    from energon_plugins.loading.dataloader import EnergonDataloader, FiniteDataloader, cyclic_iter
    from energon_plugins.loading.datamodule import EnergonMultiModalDataModule
    from energon_plugins.encoding.sample_config import ConversationTemplate, MultiModalSampleConfig
    from energon_plugins.encoding.samples import EncodedSample, MultiModalBatch
    from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
    from energon_plugins.encoding.batch_formats.base import BatchFormat
    from energon_plugins.encoding.batch_formats.visual_inputs import VisualInputs


__getattr__, __dir__ = lazy_attributes("energon_plugins", globals(), _LAZY)


__all__ = [
    "BATCH_FORMAT",
    "BatchFormat",
    "BatchFormatError",
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
    "VisualInputs",
]
