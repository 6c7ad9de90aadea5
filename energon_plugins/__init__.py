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
    PluginOutputError,
    RankTimeoutError,
    RemoteStorageError,
    SampleFailedError,
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
    "stats_scalars": "energon_plugins.loading.stats_logging",
    "add_to_tensorboard": "energon_plugins.loading.stats_logging",
    "ValidationLoader": "energon_plugins.loading.validation",
    "EndlessValidationWarning": "energon_plugins.loading.validation",
    "build_datamodule": "energon_plugins.loading.datamodule",
    "PluginTaskEncoder": "energon_plugins.encoding.task_encoders.base",
    "EncodedSample": "energon_plugins.encoding.samples",
    "MultiModalBatch": "energon_plugins.encoding.samples",
    "BatchFormat": "energon_plugins.encoding.batch_formats.base",
    "VisualInputs": "energon_plugins.encoding.batch_formats.visual_inputs",
    "convert_dataset": "energon_plugins.convert.run",
    "RecordError": "energon_plugins.convert.records",
    "SourceRecord": "energon_plugins.convert.records",
    "ConvertResult": "energon_plugins.convert.result",
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
    # The plugin author's face: what code under plugins/ may import (docs/guides/plugin-contract.md).
    "CONVERSATION_FORMATS": "energon_plugins.encoding.chat.chatml",
    "ChatMLSample": "energon_plugins.encoding.chat.chatml",
    "conversation_cookers": "energon_plugins.encoding.chat.chatml",
    "conversation_turns": "energon_plugins.encoding.chat.chatml",
    "text_turns": "energon_plugins.encoding.chat.chatml",
    "assistant_char_spans": "energon_plugins.encoding.chat.conversation",
    "build_messages": "energon_plugins.encoding.chat.conversation",
    "content_parts": "energon_plugins.encoding.chat.conversation",
    "expand_image_tokens": "energon_plugins.encoding.chat.conversation",
    "tokenize_conversation": "energon_plugins.encoding.chat.conversation",
    "vqa_answer": "energon_plugins.encoding.chat.conversation",
    "MegatronLMPrompts": "energon_plugins.encoding.chat.megatron_lm_options",
    "MEGATRON_LM_SAMPLE_TYPES": "energon_plugins.encoding.chat.megatron_lm_samples",
    "as_encodable": "energon_plugins.encoding.chat.megatron_lm_samples",
    "HFImageProcessor": "energon_plugins.encoding.image_processors.hf",
    "build_hf_image_processor": "energon_plugins.encoding.image_processors.hf",
    "energon_image_to_pil": "energon_plugins.encoding.image_processors.hf",
    "HFImageProcessorOptions": "energon_plugins.encoding.image_processors.options",
    "decode_uint8": "energon_plugins.encoding.image_processors.inputs",
    "image_height_width": "energon_plugins.encoding.image_processors.inputs",
    "is_encoded": "energon_plugins.encoding.image_processors.inputs",
    "to_pil": "energon_plugins.encoding.image_processors.inputs",
    "to_uint8_chw": "energon_plugins.encoding.image_processors.inputs",
    "concatenated": "energon_plugins.encoding.memory.outputs",
    "new_output": "energon_plugins.encoding.memory.outputs",
    "CountedSkip": "energon_plugins.encoding.skips",
    "MultimodalTaskEncoder": "energon_plugins.encoding.task_encoders.multimodal",
    "UnsupportedSampleError": "energon_plugins.encoding.task_encoders.multimodal",
    "MultimodalOptions": "energon_plugins.encoding.task_encoders.options",
    "budget_skip": "energon_plugins.encoding.video.budget",
    "budget_misfit": "energon_plugins.encoding.video.budget",
    "as_av_decoder": "energon_plugins.encoding.video.decode",
    "describe_part": "energon_plugins.encoding.video.decode",
    "labelled_videos": "energon_plugins.encoding.video.decode",
    "row_images": "energon_plugins.preview.images",
    "example_data_main": "energon_plugins.demo.examples",
    "prepare_example_data": "energon_plugins.demo.examples",
    "run_cli": "energon_plugins.cli.runner",
}

if TYPE_CHECKING:  # pragma: no cover
    from energon_plugins.cli.runner import run_cli
    from energon_plugins.convert.records import RecordError, SourceRecord
    from energon_plugins.convert.result import ConvertResult
    from energon_plugins.convert.run import convert_dataset
    from energon_plugins.demo.examples import example_data_main, prepare_example_data
    from energon_plugins.encoding.batch_formats.base import BatchFormat
    from energon_plugins.encoding.batch_formats.visual_inputs import VisualInputs
    from energon_plugins.encoding.chat.chatml import (
        CONVERSATION_FORMATS,
        ChatMLSample,
        conversation_cookers,
        conversation_turns,
        text_turns,
    )
    from energon_plugins.encoding.chat.conversation import (
        assistant_char_spans,
        build_messages,
        content_parts,
        expand_image_tokens,
        tokenize_conversation,
        vqa_answer,
    )
    from energon_plugins.encoding.chat.megatron_lm_options import MegatronLMPrompts
    from energon_plugins.encoding.chat.megatron_lm_samples import MEGATRON_LM_SAMPLE_TYPES, as_encodable
    from energon_plugins.encoding.image_processors.hf import (
        HFImageProcessor,
        build_hf_image_processor,
        energon_image_to_pil,
    )
    from energon_plugins.encoding.image_processors.inputs import (
        decode_uint8,
        image_height_width,
        is_encoded,
        to_pil,
        to_uint8_chw,
    )
    from energon_plugins.encoding.image_processors.options import HFImageProcessorOptions
    from energon_plugins.encoding.memory.outputs import concatenated, new_output
    from energon_plugins.encoding.sample_config import ConversationTemplate, MultiModalSampleConfig
    from energon_plugins.encoding.samples import EncodedSample, MultiModalBatch
    from energon_plugins.encoding.skips import CountedSkip
    from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
    from energon_plugins.encoding.task_encoders.multimodal import (
        MultimodalTaskEncoder,
        UnsupportedSampleError,
    )
    from energon_plugins.encoding.task_encoders.options import MultimodalOptions
    from energon_plugins.encoding.video.budget import VideoPlan, budget_misfit, budget_plans, budget_skip
    from energon_plugins.encoding.video.decode import (
        SampledVideo,
        VideoDecodeError,
        as_av_decoder,
        decode_frames,
        describe_part,
        labelled_videos,
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
    from energon_plugins.loading.stats_logging import add_to_tensorboard, stats_scalars
    from energon_plugins.loading.validation import EndlessValidationWarning, ValidationLoader
    from energon_plugins.preview.images import row_images


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
    "EndlessValidationWarning",
    "EnergonPluginsError",
    "LoadFailure",
    "MultiModalBatch",
    "MultiModalSampleConfig",
    "PluginConflictError",
    "PluginInfo",
    "PluginLoadError",
    "PluginNotFoundError",
    "PluginOptionsError",
    "PluginOutputError",
    "RankTimeoutError",
    "RemoteStorageError",
    "PluginSpec",
    "PluginTaskEncoder",
    "RecordError",
    "Registry",
    "SampleFailedError",
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
    "stats_scalars",
    "add_to_tensorboard",
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
    # The plugin author's face (see _LAZY).
    "CONVERSATION_FORMATS",
    "ChatMLSample",
    "conversation_cookers",
    "conversation_turns",
    "text_turns",
    "assistant_char_spans",
    "build_messages",
    "content_parts",
    "expand_image_tokens",
    "tokenize_conversation",
    "vqa_answer",
    "MegatronLMPrompts",
    "MEGATRON_LM_SAMPLE_TYPES",
    "as_encodable",
    "HFImageProcessor",
    "build_hf_image_processor",
    "energon_image_to_pil",
    "HFImageProcessorOptions",
    "decode_uint8",
    "image_height_width",
    "is_encoded",
    "to_pil",
    "to_uint8_chw",
    "concatenated",
    "new_output",
    "CountedSkip",
    "MultimodalTaskEncoder",
    "UnsupportedSampleError",
    "MultimodalOptions",
    "budget_skip",
    "budget_misfit",
    "as_av_decoder",
    "describe_part",
    "labelled_videos",
    "row_images",
    "example_data_main",
    "prepare_example_data",
    "run_cli",
]
