"""The datamodule's components from names, ``{name, options}`` and objects.

A task encoder or packing strategy is given as a registered name, a ``{name, options}``
mapping, or a ready object. Names are checked against the registry when the datamodule is
constructed (an unknown name or bad options fail there); the components themselves are built
from the datamodule's current values (its :class:`~energon_plugins.host.context.BuildContext`),
so an override applied after construction reaches them. The image processor is resolved by
:mod:`energon_plugins.loading.model_processor`.
"""

from collections.abc import Callable, Mapping
from typing import Any, Literal

from energon_plugins.errors import ConfigError, PluginNotFoundError, PluginOptionsError
from energon_plugins.host.api import create
from energon_plugins.host.context import BuildContext
from energon_plugins.host.defaults import DEFAULT_TASK_ENCODER
from energon_plugins.host.manager import get_registry
from energon_plugins.loading.distributed import parallel_layout
from energon_plugins.strict_types import short_repr

Split = Literal["train", "val"]
ContextFactory = Callable[[Split], BuildContext]
"""Gives the build context of a split, called only when a component is built from a name."""


def selection_problem(value: Mapping[Any, Any], *, name_required: bool = True) -> str | None:
    """What is wrong with a ``{name, options}`` selection (``None``: nothing): other keys, no
    name (where ``name_required``), or a name that is not a non-empty string."""
    keys = sorted(map(str, value))
    if set(keys) - {"name", "options"} or (name_required and "name" not in value):
        return f"expected {{name, options}}, got keys {keys}"
    name = value.get("name", "-")
    if not isinstance(name, str) or not name.strip():
        return f"name must be a registered plugin name (a non-empty string), got {short_repr(name)}"
    return None


def named_selection(label: str, value: Any) -> tuple[str, Any] | None:
    """``(plugin name, options)`` when ``value`` selects a plugin by name, else ``None``.

    Raises:
        ConfigError: ``value`` is a mapping other than ``{name, options}`` with a string name
            (names ``label``).
    """
    if isinstance(value, str):
        return value, None
    if isinstance(value, Mapping):
        problem = selection_problem(value)
        if problem is not None:
            raise ConfigError(f"{label}: {problem}")
        return str(value["name"]), value.get("options")
    return None


def encoder_problem(value: Any) -> str | None:
    """What is wrong with a task encoder argument's type (``None``: a name, a mapping, an
    Energon ``TaskEncoder`` object or ``None``; a mapping's keys are :func:`named_selection`'s)."""
    if value is None or isinstance(value, (str, Mapping)):
        return None
    from megatron.energon import TaskEncoder

    if isinstance(value, TaskEncoder):
        return None
    got = type(value).__name__
    if isinstance(value, type):
        got = f"the class {value.__qualname__} itself" + (
            " (pass an instance of it)" if issubclass(value, TaskEncoder) else ""
        )
    return (
        "expected a registered task encoder name (such as 'multimodal'), {name, options}, a "
        f"megatron.energon TaskEncoder object, or None; got {got}"
    )


def check_encoder_selection(label: str, value: Any) -> None:
    """Check that a task encoder selected by name exists and its options are valid.

    An encoder object (or ``None``) passes unchecked.

    Raises:
        ConfigError: neither a name, ``{name, options}``, a ``TaskEncoder`` nor ``None``; or
            a malformed ``{name, options}`` mapping.
        PluginNotFoundError, PluginOptionsError: an unknown name or bad options.
    """
    problem = encoder_problem(value)
    if problem is not None:
        raise ConfigError(f"{label}: {problem}")
    selection = named_selection(label, value)
    if selection is not None:
        name, options = selection
        try:
            get_registry().resolve("task_encoder", name).validate_options(options)
        except (PluginNotFoundError, PluginOptionsError) as exc:
            if label == "task_encoder":  # the registry's message names the kind: the argument
                raise
            raise type(exc)(f"{label}: {exc}") from exc


def encoder_label(split: Split) -> str:
    """The constructor argument that selects the task encoder of ``split``."""
    return "task_encoder" if split == "train" else "validation_task_encoder"


def build_task_encoder(value: Any, split: Split, context_of: ContextFactory) -> Any:
    """The task encoder ``value`` selects for ``split``: ``None`` is the built-in default, a
    name or ``{name, options}`` is built with ``context_of(split)``, an object is itself."""
    selection = named_selection(encoder_label(split), value)
    if value is None:
        selection = (DEFAULT_TASK_ENCODER, None)
    if selection is None:
        return value  # an encoder object
    name, options = selection
    return create("task_encoder", name, options, context_of(split))


def build_validation_encoder(
    value: Any, training_value: Any, context_of: ContextFactory, training_encoder: Callable[[], Any]
) -> Any:
    """The validation task encoder: ``value`` if given; else, for a training encoder selected
    by name (or the default), the same plugin built with ``split="val"``; else the training
    encoder object itself (``training_encoder()``)."""
    if value is not None:
        return build_task_encoder(value, "val", context_of)
    if training_value is None or named_selection("task_encoder", training_value):
        return build_task_encoder(training_value, "val", context_of)
    return training_encoder()


def resolve_packing(packing: Any, context_of: ContextFactory) -> Any:
    """A packing strategy object from a name, ``{name, options}`` or an object (or ``None``)."""
    selection = named_selection("packing", packing)
    if selection is None:  # None, or a strategy object
        return packing
    name, options = selection
    return create("packing_strategy", name, options, context_of("train"))


def datamodule_context(datamodule: Any, split: Split) -> BuildContext:
    """The :class:`BuildContext` for ``split`` from the datamodule's current values, with the
    context- and tensor-parallel sizes of its ``pg_collection``."""
    layout = parallel_layout(datamodule.pg_collection)
    return BuildContext(
        tokenizer=datamodule.tokenizer,
        image_processor=datamodule.image_processor,
        sample_config=datamodule.multimodal_sample_config,
        seq_length=datamodule.seq_length,
        decoder_seq_length=datamodule.decoder_seq_length,
        micro_batch_size=datamodule.micro_batch_size,
        packing=datamodule.packing,
        packing_buffer_size=datamodule.packing_buffer_size,
        split=split,
        cp_size=layout.cp_size,
        tp_size=layout.tp_size,
        sequence_parallel=datamodule.sequence_parallel,
    )


class TaskEncoderAttribute:
    """The datamodule's ``task_encoder`` or ``validation_task_encoder`` attribute.

    Set it to an encoder object, a registered name, ``{name, options}`` or ``None`` (a name
    is checked at once); read it for the encoder, built on first access from the datamodule's
    current values (:func:`build_task_encoder`, :func:`build_validation_encoder`) and kept
    until the attribute is set again. The selection is stored in the datamodule's
    ``_task_encoder_arg`` / ``_val_task_encoder_arg``, the built encoder in ``_task_encoder`` /
    ``_val_task_encoder``.
    """

    def __init__(self, split: Split) -> None:
        self.split: Split = split
        self.label = encoder_label(split)
        prefix = "_task_encoder" if split == "train" else "_val_task_encoder"
        self.built_name, self.selection_name = prefix, f"{prefix}_arg"

    def __get__(self, datamodule: Any, owner: type | None = None) -> Any:
        if datamodule is None:
            return self
        encoder = getattr(datamodule, self.built_name, None)
        if encoder is None:
            context_of = datamodule.build_context
            if self.split == "train":
                encoder = build_task_encoder(datamodule._task_encoder_arg, "train", context_of)
            else:
                encoder = build_validation_encoder(
                    datamodule._val_task_encoder_arg,
                    datamodule._task_encoder_arg,
                    context_of,
                    lambda: datamodule.task_encoder,
                )
            setattr(datamodule, self.built_name, encoder)
        return encoder

    def __set__(self, datamodule: Any, value: Any) -> None:
        check_encoder_selection(self.label, value)
        setattr(datamodule, self.selection_name, value)
        setattr(datamodule, self.built_name, None)
