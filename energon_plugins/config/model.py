"""The datamodule configuration as pydantic models (structure, types and ranges only).

The keys mirror :class:`energon_plugins.EnergonMultiModalDataModule`'s constructor; every
model forbids unknown keys. Checks that need the file system or the plugin registry (the
dataset path, each selected plugin's own options) live in :mod:`energon_plugins.config.validate`,
which runs them all and reports every problem at once.

Import-light: pydantic and the sample config only (no torch, transformers or Energon).
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from energon_plugins.encoding.sample_config import MultiModalSampleConfig

PluginName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

DEFAULT_TASK_ENCODER = "multimodal"
DEFAULT_IMAGE_PROCESSOR = "hf"
DEFAULT_BATCH_FORMAT = "energon-plugins:megatron-bridge"
"""The default batch format, qualified: the built-in even when a plugin claims the plain name."""

_STRICT = ConfigDict(extra="forbid")


class TokenizerConfig(BaseModel):
    """``tokenizer: {path}``: a local Hugging Face tokenizer directory (or a cached hub id)."""

    model_config = _STRICT

    path: str = Field(
        description="A directory holding a saved Hugging Face tokenizer (relative paths are "
        "resolved against the config file's directory), or a hub id already in the local cache. "
        "Loaded with AutoTokenizer.from_pretrained(path, local_files_only=True)."
    )


class TaskEncoderSelection(BaseModel):
    """``task_encoder: {name, options}``: which task encoder to build, and its options."""

    model_config = _STRICT

    name: PluginName = Field(
        default=DEFAULT_TASK_ENCODER,
        description="A registered task encoder: plain name, alias or 'distribution:name'.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="The plugin's own options (see `energon-plugins show`)."
    )


class ImageProcessorSelection(BaseModel):
    """``image_processor: {name, options}``: which image processor to build, and its options."""

    model_config = _STRICT

    name: PluginName = Field(
        default=DEFAULT_IMAGE_PROCESSOR,
        description="A registered image processor: plain name, alias or 'distribution:name'.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="The plugin's own options (see `energon-plugins show`)."
    )


class PackingSelection(BaseModel):
    """``packing: {name, options}``: the sequence-packing strategy (needs packing_buffer_size)."""

    model_config = _STRICT

    name: PluginName = Field(
        description="A registered packing strategy, e.g. 'first-fit-decreasing'."
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="The strategy's own options."
    )


class BatchFormatSelection(BaseModel):
    """``batch_format: {name, options}``: what the training loop reads from the loader.

    ``megatron-bridge`` (the default), ``megatron-lm``, ``hf`` or a plugin's format; ``null``
    leaves the task encoder's batch as it is.
    """

    model_config = _STRICT

    name: PluginName = Field(
        default=DEFAULT_BATCH_FORMAT,
        description="A registered batch format: plain name, alias or 'distribution:name'; "
        "default: the built-in megatron-bridge.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="The format's own options."
    )


class ValidationTaskEncoderSelection(BaseModel):
    """``validation_task_encoder: {name, options}``; each part defaults to the train encoder's.

    A missing ``name`` means the train encoder's name; missing ``options`` mean the train
    encoder's options when the name is the same, else the plugin's defaults. Either way the
    encoder is built with ``split="val"`` in its context.
    """

    model_config = _STRICT

    name: PluginName | None = Field(
        default=None, description="A registered task encoder; default: the train encoder's name."
    )
    options: dict[str, Any] | None = Field(
        default=None, description="Its options; default: the train encoder's (same name) or {}."
    )


class DataModuleConfig(BaseModel):
    """Everything :class:`EnergonMultiModalDataModule` needs, selected by name.

    Defaults are the constructor's. ``sample_config`` is the constructor's
    ``multimodal_sample_config``; ``energon`` holds extra keyword arguments for Energon's
    ``get_train_dataset``.
    """

    model_config = _STRICT

    path: str = Field(
        description="An Energon dataset: a directory with .nv-meta/dataset.yaml, or a "
        "metadataset YAML file. Relative paths are resolved against the config file's directory."
    )
    seq_length: int = Field(default=2048, ge=1, description="Maximum tokens per sequence.")
    micro_batch_size: int = Field(default=1, ge=1, description="Sequences per micro batch.")
    global_batch_size: int = Field(
        default=1, ge=1, description="Sequences per global batch (a multiple of micro_batch_size)."
    )
    num_workers: int = Field(default=1, ge=0, description="Training loader worker processes.")
    num_val_workers: int | None = Field(
        default=None, ge=0, description="Validation loader workers; default: num_workers."
    )
    pin_memory: bool = Field(default=True, description="Pin batches in page-locked memory.")
    shuffle_buffer_size: int = Field(
        default=100, ge=0, description="Samples in the shuffle buffer (before encoding)."
    )
    max_samples_per_sequence: int | None = Field(
        default=None, ge=1, description="Samples read per shard sequence; default: whole shard."
    )
    decoder_seq_length: int | None = Field(
        default=None, ge=1, description="Decoder sequence length of encoder-decoder models."
    )
    packing_buffer_size: int | None = Field(
        default=None, ge=1, description="Encoded samples the packing strategy chooses from."
    )
    sample_config: MultiModalSampleConfig = Field(
        default_factory=MultiModalSampleConfig,
        description="Image token, ignore index and conversation template.",
    )
    tokenizer: TokenizerConfig = Field(description="The tokenizer to load.")
    image_processor: ImageProcessorSelection = Field(
        default_factory=ImageProcessorSelection, description="The image processor to build."
    )
    task_encoder: TaskEncoderSelection = Field(
        default_factory=TaskEncoderSelection, description="The training task encoder."
    )
    validation_task_encoder: ValidationTaskEncoderSelection | None = Field(
        default=None,
        description="The validation task encoder; default: the train encoder with split='val'.",
    )
    packing: PackingSelection | None = Field(
        default=None, description="The packing strategy; null: no packing."
    )
    batch_format: BatchFormatSelection | None = Field(
        default_factory=BatchFormatSelection,
        description="What the training loop reads: megatron-bridge (default), megatron-lm, hf or "
        "a plugin's format; null: the task encoder's batch as it is.",
    )
    energon: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra keyword arguments for Energon's get_train_dataset "
        "(e.g. virtual_epoch_length, shuffle_over_epochs_multiplier).",
    )

    def resolved_validation_selection(self) -> TaskEncoderSelection:
        """The validation encoder's ``{name, options}`` with the defaults filled in."""
        val = self.validation_task_encoder
        if val is None:
            return self.task_encoder.model_copy(deep=True)
        name = val.name if val.name is not None else self.task_encoder.name
        if val.options is not None:
            options = dict(val.options)
        elif name == self.task_encoder.name:
            options = dict(self.task_encoder.options)
        else:
            options = {}
        return TaskEncoderSelection(name=name, options=options)


SELECTIONS: dict[str, str] = {
    "task_encoder": "task_encoder",
    "validation_task_encoder": "task_encoder",
    "image_processor": "image_processor",
    "packing": "packing_strategy",
    "batch_format": "batch_format",
}
"""Config key of each ``{name, options}`` selection -> the plugin kind it selects."""

ENERGON_RESERVED: dict[str, str] = {
    "path": "path",
    "split_part": "(chosen by the datamodule per loader)",
    "worker_config": "num_workers",
    "batch_size": "micro_batch_size",
    "packing_buffer_size": "packing_buffer_size",
    "shuffle_buffer_size": "shuffle_buffer_size",
    "max_samples_per_sequence": "max_samples_per_sequence",
    "task_encoder": "task_encoder",
}
"""``get_train_dataset`` arguments the datamodule sets itself -> the config key that sets it."""

ENERGON_KNOWN: tuple[str, ...] = (
    "batch_drop_last", "virtual_epoch_length", "shuffle_over_epochs_multiplier", "repeat",
    "dataset_config", "split_config", "subflavors", "subset", "parallel_shard_iters",
    "cache_pool", "auto_decode", "image_decode", "ignore_decoder_errors", "av_decode",
    "video_decode_audio", "handler",
)
"""Keyword arguments Energon 7.4's ``get_train_dataset`` and its dataset loaders take. Other
keys still pass through (datasets may take their own), but one close to a known name is
reported as a likely typo."""
