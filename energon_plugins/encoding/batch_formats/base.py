"""``BatchFormat``: the base of the built-in batch formats (and of a plugin's own).

A batch format is a callable ``fmt(batch) -> object``. The base does the dispatch every format
needs: a :class:`~energon_plugins.MultiModalBatch` goes to :meth:`BatchFormat.format`, a batch
of any other type (a user's own encoder's dict or dataclass) passes through unchanged.
"""

import functools
from typing import Any, overload

import torch

from energon_plugins.encoding.samples import MultiModalBatch
from energon_plugins.errors import BatchFormatError
from energon_plugins.host.context import BuildContext


class BatchFormat:
    """Turn the project's collated batch into what one training loop reads.

    Args:
        context: the run's :class:`~energon_plugins.BuildContext` (tokenizer, sample config,
            sequence length, ...).
        options: the format's validated options (a pydantic model) or ``None``.

    Subclasses set :attr:`name` and implement :meth:`format`, and may declare
    :attr:`tensor_keys`.
    """

    name = "batch-format"
    tensor_keys: tuple[str, ...] = ()
    """Keys every output of :meth:`format` holds as tensors; the loader checks each batch
    (:mod:`energon_plugins.encoding.batch_formats.checked`) and stops, naming the format, at
    one that breaks the declaration."""

    def __init__(self, context: BuildContext | None = None, options: Any = None) -> None:
        self.context = context if context is not None else BuildContext()
        self.options = options

    def __call__(self, batch: Any) -> Any:
        """:meth:`format` a :class:`~energon_plugins.MultiModalBatch`; anything else as is."""
        if not isinstance(batch, MultiModalBatch):
            return batch
        return self.format(batch)

    def format(self, batch: MultiModalBatch) -> Any:
        """Return what the loop reads for ``batch`` (override)."""
        raise NotImplementedError

    @functools.cached_property
    def ignore_index(self) -> int:
        """The label value the task encoder used where the loss is off (sample config)."""
        config = self.context.sample_config
        return int(getattr(config, "ignore_index", -100))

    @functools.cached_property
    def pad_token_id(self) -> int:
        """The tokenizer's pad id, else its eos id, else 0 (what the task encoders pad with)."""
        tokenizer = self.context.tokenizer
        for attr in ("pad_token_id", "eos_token_id"):
            value = getattr(tokenizer, attr, None) if tokenizer is not None else None
            if isinstance(value, int):
                return value
        return 0

    def refuse(self, reason: str) -> BatchFormatError:
        """The error for a batch this format cannot express (raise it)."""
        return BatchFormatError(f"batch format {self.name!r} cannot express this batch: {reason}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(options={self.options!r})"


def row_keys(batch: MultiModalBatch) -> list[str]:
    """The ``__key__`` of every row (a packed row's keys joined with commas)."""
    keys = batch.__key__
    if isinstance(keys, (list, tuple)):
        return [str(k) for k in keys]
    return [str(keys)] * int(batch.input_ids.shape[0])


@overload
def flat(tensor: torch.Tensor) -> torch.Tensor: ...


@overload
def flat(tensor: None) -> None: ...


def flat(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """``(B, L, ...)`` -> ``(1, B * L, ...)``: rows laid end to end, as a packed (THD) stream."""
    if tensor is None:
        return None
    return tensor.reshape(1, -1, *tensor.shape[2:])
