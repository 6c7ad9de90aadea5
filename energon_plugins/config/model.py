"""The datamodule configuration as pydantic models (structure, types and ranges only).

The keys mirror :class:`energon_plugins.EnergonMultiModalDataModule`'s constructor: the scalar
settings are the constructor's own model (:class:`energon_plugins.config.settings.LoaderSettings`,
inherited, so a key and a keyword validate alike); every model forbids unknown keys. Checks that
need the file system or the plugin registry (the dataset path, each selected plugin's own
options) and the rules between keys live in :mod:`energon_plugins.config.validate`, which runs
them all and reports every problem at once.

Import-light: pydantic and the sample config only (no torch, transformers or Energon).
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from energon_plugins.config.cache_pool import CachePoolSettings
from energon_plugins.config.energon_arguments import (
    ENERGON_DATASET_ARGUMENTS,
    ENERGON_RESERVED,
)
from energon_plugins.config.schedule import BlendSchedule
from energon_plugins.config.settings import LoaderSettings
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.host.defaults import (
    DEFAULT_BATCH_FORMAT,
    DEFAULT_IMAGE_PROCESSOR,
    DEFAULT_TASK_ENCODER,
)

PluginName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

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

    name: PluginName = Field(description="A registered packing strategy, e.g. 'first-fit-decreasing'.")
    options: dict[str, Any] = Field(default_factory=dict, description="The strategy's own options.")


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
    options: dict[str, Any] = Field(default_factory=dict, description="The format's own options.")


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


class DataModuleConfig(LoaderSettings):
    """Everything :class:`EnergonMultiModalDataModule` needs, selected by name.

    Defaults are the constructor's. ``sample_config`` is the constructor's
    ``multimodal_sample_config``; ``energon`` holds extra keyword arguments for Energon's
    ``get_train_dataset`` (and, where they describe the dataset, ``get_val_dataset``).
    """

    model_config = _STRICT

    path: str = Field(
        description="An Energon dataset: a directory with .nv-meta/dataset.yaml, a "
        "metadataset YAML file, a .jsonl file, or a remote msc:// path. Relative paths are "
        "resolved against the config file's directory."
    )
    sample_config: MultiModalSampleConfig = Field(
        default_factory=MultiModalSampleConfig,
        description="Image token, ignore index and conversation template.",
    )
    tokenizer: TokenizerConfig = Field(description="The tokenizer to load.")
    image_processor: ImageProcessorSelection = Field(
        default_factory=ImageProcessorSelection,
        description="The image processor to build. Left out: the model directory's, when "
        "tokenizer.path holds a preprocessor_config.json (hf with that path), else hf's "
        "CLIPImageProcessor().",
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
    cache_pool: CachePoolSettings | None = Field(
        default=None,
        description="A local cache for media read from a metadataset's aux sources (Energon's "
        "FileStoreCachePool): {path: DIR, max_size_gb: N}; null: none.",
    )
    blend_schedule: BlendSchedule | None = Field(
        default=None,
        description="Weights of the training blend that change as the run goes (a curriculum): "
        "stages [{at: SAMPLES, weights: {ENTRY: W}}] in increasing order of at, each naming "
        "every top-level blend entry; before the first stage the metadataset's own weights. "
        "Saved and restored with the loader state.",
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

ENERGON_KNOWN: tuple[str, ...] = tuple(ENERGON_DATASET_ARGUMENTS)
"""The extra dataset arguments the ``energon:`` section accepts (see
:data:`energon_plugins.config.energon_arguments.ENERGON_DATASET_ARGUMENTS`)."""

__all__ = [
    "DEFAULT_IMAGE_PROCESSOR",
    "DEFAULT_TASK_ENCODER",
    "ENERGON_KNOWN",
    "ENERGON_RESERVED",
    "SELECTIONS",
    "DataModuleConfig",
    "ImageProcessorSelection",
    "PackingSelection",
    "TaskEncoderSelection",
    "TokenizerConfig",
    "ValidationTaskEncoderSelection",
]
