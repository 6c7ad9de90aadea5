"""energon-plugins: a plugin registry for Megatron-Energon task encoders.

Light names (the registry, hook markers, configs, errors) import eagerly and cost no torch,
transformers or Energon import. The datamodule, the loader and the task-encoder base classes
load on first access.
"""

from typing import TYPE_CHECKING

from energon_plugins._lazy import lazy_attributes
from energon_plugins.errors import (
    BatchFormatError,
    ConfigError,
    ConvertError,
    DatasetError,
    EnergonPluginsError,
    PluginConflictError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionsError,
)
from energon_plugins.host._markers import ENTRY_POINT_GROUP, hookimpl, hookspec
from energon_plugins.host.api import available, create, resolve
from energon_plugins.host.context import BuildContext
from energon_plugins.host.kinds import (
    BATCH_FORMAT,
    IMAGE_PROCESSOR,
    KINDS,
    PACKING_STRATEGY,
    SOURCE_FORMAT,
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
    "ValidationLoader": "energon_plugins.loading.validation",
    "build_datamodule": "energon_plugins.loading.datamodule",
    "PluginTaskEncoder": "energon_plugins.encoding.task_encoders.base",
    "EncodedSample": "energon_plugins.encoding.samples",
    "MultiModalBatch": "energon_plugins.encoding.samples",
    "BatchFormat": "energon_plugins.encoding.batch_formats.base",
    "VisualInputs": "energon_plugins.encoding.batch_formats.visual_inputs",
    "convert_dataset": "energon_plugins.convert.run",
    "RecordError": "energon_plugins.convert.records",
    "SourceRecord": "energon_plugins.convert.records",
    "ConvertResult": "energon_plugins.convert.run",
    "VideoOptions": "energon_plugins.encoding.video.options",
    "VideoInfo": "energon_plugins.encoding.video.sampling",
    "frame_count": "energon_plugins.encoding.video.sampling",
    "frame_indices": "energon_plugins.encoding.video.sampling",
    "SampledVideo": "energon_plugins.encoding.video.decode",
    "VideoDecodeError": "energon_plugins.encoding.video.decode",
    "read_video_info": "energon_plugins.encoding.video.decode",
    "decode_frames": "energon_plugins.encoding.video.decode",
    "VideoPlan": "energon_plugins.encoding.video.budget",
    "budget_plans": "energon_plugins.encoding.video.budget",
    "BatchFormatProtocol": "energon_plugins.host.protocols",
    "ImageProcessorProtocol": "energon_plugins.host.protocols",
    "PackingStrategyProtocol": "energon_plugins.host.protocols",
    "SourceFilesProtocol": "energon_plugins.host.protocols",
    "SourceFormatProtocol": "energon_plugins.host.protocols",
    "TaskEncoderProtocol": "energon_plugins.host.protocols",
}

if TYPE_CHECKING:  # pragma: no cover
    from energon_plugins.convert.records import RecordError, SourceRecord
    from energon_plugins.convert.run import ConvertResult, convert_dataset
    from energon_plugins.encoding.batch_formats.base import BatchFormat
    from energon_plugins.encoding.batch_formats.visual_inputs import VisualInputs
    from energon_plugins.encoding.sample_config import ConversationTemplate, MultiModalSampleConfig
    from energon_plugins.encoding.samples import EncodedSample, MultiModalBatch
    from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
    from energon_plugins.encoding.video.budget import VideoPlan, budget_plans
    from energon_plugins.encoding.video.decode import (
        SampledVideo,
        VideoDecodeError,
        decode_frames,
        read_video_info,
    )
    from energon_plugins.encoding.video.options import VideoOptions
    from energon_plugins.encoding.video.sampling import VideoInfo, frame_count, frame_indices
    from energon_plugins.host.protocols import (
        BatchFormatProtocol,
        ImageProcessorProtocol,
        PackingStrategyProtocol,
        SourceFilesProtocol,
        SourceFormatProtocol,
        TaskEncoderProtocol,
    )
    from energon_plugins.loading.dataloader import EnergonDataloader, cyclic_iter
    from energon_plugins.loading.datamodule import EnergonMultiModalDataModule, build_datamodule
    from energon_plugins.loading.validation import ValidationLoader


__getattr__, __dir__ = lazy_attributes("energon_plugins", globals(), _LAZY)


__all__ = [
    "BATCH_FORMAT",
    "BatchFormat",
    "BatchFormatError",
    "ENTRY_POINT_GROUP",
    "IMAGE_PROCESSOR",
    "KINDS",
    "PACKING_STRATEGY",
    "SOURCE_FORMAT",
    "TASK_ENCODER",
    "BuildContext",
    "ConfigError",
    "ConversationTemplate",
    "ConvertError",
    "ConvertResult",
    "DatasetError",
    "EncodedSample",
    "EnergonDataloader",
    "EnergonMultiModalDataModule",
    "EnergonPluginsError",
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
    "RecordError",
    "Registry",
    "SampledVideo",
    "SourceRecord",
    "ValidationLoader",
    "VideoDecodeError",
    "VideoInfo",
    "VideoOptions",
    "VideoPlan",
    "__version__",
    "available",
    "budget_plans",
    "build_datamodule",
    "convert_dataset",
    "create",
    "cyclic_iter",
    "decode_frames",
    "frame_count",
    "frame_indices",
    "get_registry",
    "hookimpl",
    "hookspec",
    "isolated_registry",
    "load_registry",
    "read_video_info",
    "reset_registry",
    "resolve",
    "use_registry",
    "VisualInputs",
    "BatchFormatProtocol",
    "ImageProcessorProtocol",
    "PackingStrategyProtocol",
    "SourceFilesProtocol",
    "SourceFormatProtocol",
    "TaskEncoderProtocol",
]
