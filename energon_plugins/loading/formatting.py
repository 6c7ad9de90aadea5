"""Selecting a batch format and running it in the loader's workers.

The datamodule's ``batch_format`` is a registered name, ``{name, options}``, a callable
``fmt(batch) -> object``, or ``None`` (the task encoder's batch as it is). The default,
:data:`~energon_plugins.host.defaults.DEFAULT_BATCH_FORMAT`, is the built-in
``megatron-bridge`` even when a plugin registers the same plain name.

:class:`BatchFormatDataset` is the stage that applies it: the outermost Energon wrapper
around the task encoder's batches, so the format runs in the worker processes right after
``encode_batch``, the main process only receives the final structure, and pinning applies to
it. It holds no state of its own, so loader checkpoints are unchanged.
"""

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from megatron.energon.wrappers.base import BaseWrapperDataset

from energon_plugins.encoding.batch_formats.checked import checked_batch_format
from energon_plugins.errors import BatchFormatError, ConfigError
from energon_plugins.host.context import BuildContext
from energon_plugins.host.defaults import DEFAULT_BATCH_FORMAT
from energon_plugins.host.kinds import BATCH_FORMAT
from energon_plugins.loading.stages import TransparentRestore

__all__ = [
    "DEFAULT_BATCH_FORMAT",
    "BatchFormatDataset",
    "build_batch_format",
    "check_batch_format_arg",
]


def _selection(value: Any) -> tuple[str, Any] | None:
    """``(name, options)`` when ``value`` selects a registered format, else ``None``."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, Mapping):
        unknown = set(value) - {"name", "options"}
        if unknown:
            raise ConfigError(f"batch_format: expected {{name, options}}, got keys {sorted(map(str, value))}")
        return str(value.get("name", DEFAULT_BATCH_FORMAT)), value.get("options")
    return None


def check_batch_format_arg(value: Any) -> None:
    """Check the ``batch_format`` argument: a known name with valid options, a callable, or None.

    Raises:
        ConfigError: neither a selection, a callable nor ``None``.
        PluginNotFoundError, PluginConflictError, PluginOptionsError: a bad selection.
    """
    if value is None:
        return
    selection = _selection(value)
    if selection is None:
        if callable(value):
            return
        raise ConfigError(
            "batch_format must be a registered name, {name, options}, a callable "
            f"fmt(batch) or None, got {type(value).__name__}"
        )
    from energon_plugins.host.manager import get_registry

    spec = get_registry().resolve(BATCH_FORMAT, selection[0])
    spec.validate_options(selection[1], path="batch_format.options")


def build_batch_format(value: Any, context: BuildContext) -> tuple[Callable[[Any], Any] | None, str]:
    """``(fmt, label)``: the format ``value`` selects, built with ``context``, and how errors
    name it (``None`` and ``""`` for no format)."""
    if value is None:
        return None, ""
    selection = _selection(value)
    if selection is None:
        check_batch_format_arg(value)
        label = f"batch format {getattr(value, '__qualname__', type(value).__name__)}"
        return checked_batch_format(value, label), label
    from energon_plugins.host.manager import get_registry

    registry = get_registry()
    spec = registry.resolve(BATCH_FORMAT, selection[0])
    fmt = registry.create(BATCH_FORMAT, selection[0], selection[1], context, path="batch_format.options")
    return checked_batch_format(fmt, spec.label), spec.label  # outputs checked: a loop gets tensors


def _encoder_label(encoder: Any) -> str:
    return type(encoder).__name__ if encoder is not None else "(unknown)"


class BatchFormatDataset(TransparentRestore, BaseWrapperDataset):
    """Apply a batch format to every batch of the wrapped Energon dataset (in the worker).

    A failure of the format stops the loader with a :class:`BatchFormatError` naming the
    format and the task encoder (a format that cannot express a batch is a setup error, not a
    bad sample to skip).
    """

    _savable_fields = ()

    def __init__(self, dataset: Any, fmt: Callable[[Any], Any], *, label: str, encoder: Any = None) -> None:
        super().__init__(dataset, worker_config=dataset.worker_config)
        self.fmt = fmt
        self.label = label
        self.encoder_label = _encoder_label(encoder)

    def reset_state_own(self) -> None:
        """Nothing to reset: the stage holds no state."""

    def len_worker(self, worker_idx: int | None = None) -> int:
        """The inner dataset's length."""
        return self.dataset.len_worker(worker_idx)

    def apply(self, batch: Any) -> Any:
        """The format of ``batch``; errors are re-raised naming the format and the encoder."""
        try:
            return self.fmt(batch)
        except BatchFormatError as exc:
            raise BatchFormatError(f"{exc} (from task encoder {self.encoder_label})") from exc
        except Exception as exc:
            raise BatchFormatError(
                f"{self.label} failed on a batch of task encoder {self.encoder_label} "
                f"({type(batch).__name__}): {type(exc).__name__}: {exc}"
            ) from exc

    def __iter__(self) -> Iterator[Any]:
        for batch in self.dataset:
            yield self.apply(batch)

    def restore_sample(self, restore_key: Any) -> Any:
        """The inner batch, restored and formatted."""
        return self.apply(self.dataset.restore_sample(restore_key))

    def config(self) -> dict[str, Any]:
        """Transparent: the inner dataset's config (the format does not change what is read)."""
        return self.dataset.config()

    def __str__(self) -> str:
        return f"BatchFormatDataset({self.label}, dataset={self.dataset})"
