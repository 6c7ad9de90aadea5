"""Building a datamodule from a config, with late binding.

:func:`datamodule_keywords` (what :meth:`EnergonMultiModalDataModule.from_config
<energon_plugins.EnergonMultiModalDataModule.from_config>` and
:func:`energon_plugins.build_datamodule` call) applies the overrides to the config, validates the result (every
error at once), and only then loads the tokenizer and builds the image processor and the
packing strategy through :func:`energon_plugins.create` with a :class:`BuildContext` of the
final values. The task encoders are handed to the datamodule as ``{name, options}``
selections, which it builds through ``create`` from its own final attributes on first use
(the validation encoder with ``split="val"``), so no component ever sees a stale
``seq_length`` or packing setting (the upstream bug, Megatron-Bridge 4343).
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_plugins.config.model import DataModuleConfig
from energon_plugins.config.settings import SETTING_NAMES
from energon_plugins.errors import ConfigError
from energon_plugins.host.context import BuildContext

RUNTIME_ARGUMENTS = ("pg_collection", "validation_mode", "device")
"""Keyword arguments of :func:`build_datamodule` that are not config keys but runtime objects,
passed to the datamodule's constructor as they are."""


def load_tokenizer(path: str) -> Any:
    """``AutoTokenizer.from_pretrained(path, local_files_only=True)``, with a clear error. Code
    shipped in the folder is never run (``trust_remote_code=False``: transformers would otherwise
    ask on the terminal).

    Raises:
        ConfigError: naming ``tokenizer.path`` and why loading failed.
    """
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise ConfigError(
            f"tokenizer.path: cannot load a tokenizer from {path!r}: {type(exc).__name__}: {text}"
        ) from exc


def base_context(config: DataModuleConfig, pg_collection: Any = None, **changes: Any) -> BuildContext:
    """A :class:`BuildContext` from the config's final values and ``pg_collection``'s context-
    and tensor-parallel sizes (plus ``changes``)."""
    from energon_plugins.loading.distributed import parallel_layout

    layout = parallel_layout(pg_collection)
    values: dict[str, Any] = {
        "sample_config": config.sample_config,
        "seq_length": config.seq_length,
        "decoder_seq_length": config.decoder_seq_length,
        "micro_batch_size": config.micro_batch_size,
        "packing_buffer_size": config.packing_buffer_size,
        "split": "train",
        "cp_size": layout.cp_size,
        "tp_size": layout.tp_size,
        "sequence_parallel": config.sequence_parallel,
    }
    values.update(changes)
    return BuildContext(**values)


def names_image_processor(config: DataModuleConfig) -> bool:
    """Whether ``config`` selects its image processor (an ``image_processor`` key, or an
    override of it) rather than leaving it to the default."""
    return "image_processor" in config.model_fields_set


def build_image_processor(config: DataModuleConfig, context: BuildContext) -> Any:
    """The image processor to hand the datamodule, or ``None`` when it takes the model's.

    A selected image processor is built. Without one, a tokenizer loaded from a model
    directory with a ``preprocessor_config.json`` means ``None``: the datamodule builds the
    ``hf`` processor of that directory itself (one place for the rule:
    :func:`energon_plugins.loading.model_processor.resolve_image_processor`). Otherwise the
    default selection (``energon-plugins:hf``, transformers' ``CLIPImageProcessor()``).
    """
    from energon_plugins.host.api import create
    from energon_plugins.loading.model_processor import model_processor_directory

    if not names_image_processor(config) and model_processor_directory(context.tokenizer):
        return None
    selection = config.image_processor
    return create("image_processor", selection.name, selection.options, context)


def build_components(
    config: DataModuleConfig, tokenizer: Any = None, pg_collection: Any = None
) -> dict[str, Any]:
    """Load the tokenizer and build the image processor and packing strategy of ``config``.

    Returns ``{"tokenizer", "image_processor", "packing"}`` (``image_processor`` is ``None``
    when the datamodule takes the model directory's, see :func:`build_image_processor`;
    ``packing`` is ``None`` without a ``packing`` selection). Each is built after validation,
    from the final values.
    """
    from energon_plugins.host.api import create

    if tokenizer is None:
        tokenizer = load_tokenizer(config.tokenizer.path)
    context = base_context(config, pg_collection, tokenizer=tokenizer)
    image_processor = build_image_processor(config, context)
    packing = None
    if config.packing is not None:
        context = context.replace(image_processor=image_processor)
        packing = create("packing_strategy", config.packing.name, config.packing.options, context)
    return {"tokenizer": tokenizer, "image_processor": image_processor, "packing": packing}


def datamodule_arguments(config: DataModuleConfig) -> dict[str, Any]:
    """The constructor arguments that come straight from ``config`` (no component built)."""
    args: dict[str, Any] = {name: getattr(config, name) for name in SETTING_NAMES}
    args.update(
        {
            "path": config.path,
            "multimodal_sample_config": config.sample_config,
            "task_encoder": {"name": config.task_encoder.name, "options": config.task_encoder.options},
            "validation_task_encoder": None,
            "cache_pool": config.cache_pool,
            "blend_schedule": config.blend_schedule,
            "batch_format": None
            if config.batch_format is None
            else {"name": config.batch_format.name, "options": config.batch_format.options},
        }
    )
    if config.validation_task_encoder is not None:
        val = config.resolved_validation_selection()
        args["validation_task_encoder"] = {"name": val.name, "options": val.options}
    args.update(config.energon)
    return args


def datamodule_keywords(
    config_or_path: "str | Path | Mapping[str, Any] | DataModuleConfig", **overrides: Any
) -> dict[str, Any]:
    """The constructor keywords of an :class:`~energon_plugins.EnergonMultiModalDataModule`
    for a config, its components built from the final values.

    Args:
        config_or_path: a YAML/JSON file, a mapping, or a :class:`DataModuleConfig`.
        **overrides: config keys to change before anything is built. A mapping merges into
            the section (``task_encoder={"options": {"image_tokens": 4}}`` keeps the name); a
            dotted key addresses one value (``**{"task_encoder.options.image_tokens": 4}``);
            any other value, ``None`` included, replaces. ``pg_collection``,
            ``validation_mode`` and ``device`` are passed to the constructor as they are.

    Raises:
        ConfigValidationError: the config with the overrides applied is invalid (every error,
            each with its dotted path); nothing has been built.
        ConfigError, PluginLoadError: a component cannot be loaded or built.
    """
    from energon_plugins.config.load import load_config

    runtime = {key: overrides.pop(key) for key in RUNTIME_ARGUMENTS if key in overrides}
    config = load_config(config_or_path, overrides)  # validated before anything is built
    components = build_components(config, pg_collection=runtime.get("pg_collection"))
    return {
        "tokenizer": components["tokenizer"],
        "image_processor": components["image_processor"],
        "packing": components["packing"],
        **datamodule_arguments(config),
        **runtime,
    }
