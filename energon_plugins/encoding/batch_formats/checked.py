"""The batch format as the loader runs it: every output checked before a training loop sees it.

:func:`checked_batch_format` wraps the format a datamodule selects (a registered plugin or a
callable) where it is built (:func:`energon_plugins.loading.formatting.build_batch_format`).
Each output must be what a loop can read
(:func:`~energon_plugins.encoding.plugin_outputs.format_output_problem`: a mapping with
tensors where loops read tensors, and every key the format declares in ``tensor_keys``); a
format that returns ``None``, ``42`` or a list stops the loader at the first batch with a
:class:`BatchFormatOutputError` naming the plugin. The check reads a handful of keys (well
under a microsecond per key), so it runs on every batch.
"""

from collections.abc import Callable
from typing import Any

from energon_plugins.encoding.plugin_outputs import format_output_problem
from energon_plugins.errors import BatchFormatError, PluginOutputError


class BatchFormatOutputError(PluginOutputError, BatchFormatError):
    """A batch format returned what a training loop cannot read (also a ``BatchFormatError``);
    the message names the format's plugin."""


class CheckedBatchFormat:
    """``fmt`` with its outputs checked; other attributes are ``fmt``'s own.

    Args:
        fmt: the batch format, ``fmt(batch) -> output``.
        label: how messages name it (``batch_format 'hf' (energon-plugins)``).
    """

    def __init__(self, fmt: Callable[[Any], Any], label: str) -> None:
        self.fmt = fmt
        self.label = label
        keys = getattr(fmt, "tensor_keys", ())
        self.tensor_keys: tuple[str, ...] = tuple(keys) if isinstance(keys, (tuple, list)) else ()

    def __call__(self, batch: Any) -> Any:
        """``fmt(batch)``, refused with :class:`BatchFormatOutputError` if a loop cannot read it."""
        output = self.fmt(batch)
        problem = format_output_problem(output, batch, self.tensor_keys)
        if problem is not None:
            raise BatchFormatOutputError(f"{self.label} {problem[1]}")
        return output

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("fmt", "label", "tensor_keys"):
            raise AttributeError(name)  # unpickling: not set yet
        return getattr(self.fmt, name)

    def __repr__(self) -> str:
        return f"CheckedBatchFormat({self.fmt!r})"


def checked_batch_format(fmt: Callable[[Any], Any], label: str) -> CheckedBatchFormat:
    """``fmt`` wrapped so that each output is checked (an already wrapped one as it is)."""
    if isinstance(fmt, CheckedBatchFormat):
        return fmt
    return CheckedBatchFormat(fmt, label)
