"""The validation loader: deterministic, never running dry, the same length on every DP rank.

Megatron's loops (Megatron-Bridge, Megatron-LM) make ``iter(val_dataloader())`` once and call
``next()`` ``eval_iters`` times at every evaluation, with no ``StopIteration`` handling; their
loss reduction is a collective over the data-parallel ranks, so every rank must run the same
number of batches. Energon's validation split is finite, unshuffled, and shared out unevenly:
one DP rank may get more batches than another.

:class:`ValidationLoader` (what ``val_dataloader()`` returns) serves both:

- ``len(loader)`` is the number of batches of one *evaluation*: one pass over this rank's part
  of the split, padded to the longest rank's pass (agreed over the DP group), or
  ``val_batches_per_evaluation`` when that is set. It is the same on every DP rank.
- ``iter(loader)`` never runs dry: it yields evaluation after evaluation, each starting the
  split again from the beginning, so every evaluation sees the same batches in the same order.
  A rank whose part is shorter pads with *filler* batches: a copy of a real batch with an
  all-zero ``loss_mask`` and ``labels`` all ``ignore_index``. Every validation sample is
  evaluated exactly once per pass across the ranks, and fillers add nothing to a loss sum.
- :meth:`ValidationLoader.one_pass` yields exactly one evaluation and stops, for hand-written
  loops (``for batch in dm.val_dataloader().one_pass()``). Lightning's trainer stops at
  ``len()`` on its own, and calls ``iter()`` afresh every epoch, so it sees one pass per epoch.

Restarting mid-pass is exact: :class:`RestartingDataset` resets the Energon pipeline at the
start of every iteration (Energon's datasets otherwise continue where an abandoned iteration
stopped).
"""

import copy
import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from megatron.energon.wrappers.base import BaseWrapperDataset

from energon_plugins.errors import ConfigError, DatasetError
from energon_plugins.loading.heap import frozen_for_pass

logger = logging.getLogger(__name__)

PADDING_KEY = "__padding__"
"""The sample key filler batches carry in ``__key__`` (one per row)."""


class RestartingDataset(BaseWrapperDataset):
    """Outermost validation wrapper: every iteration starts the inner pipeline from scratch.

    With persistent workers, a new ``iter()`` on Energon's loader re-enters each worker's
    dataset where the previous iteration left it; resetting the inner state first makes an
    abandoned pass (``val_batches_per_evaluation`` smaller than a pass) harmless.
    """

    _savable_fields = ()

    def __init__(self, dataset: Any) -> None:
        super().__init__(dataset, worker_config=dataset.worker_config)

    def reset_state_own(self) -> None:
        """Nothing of its own to reset."""

    def len_worker(self, worker_idx: int | None = None) -> int:
        """The inner dataset's length."""
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        self.dataset.reset_state_deep()
        yield from self.dataset

    def config(self) -> dict[str, Any]:
        """Transparent: the inner dataset's config."""
        return self.dataset.config()

    def __str__(self) -> str:
        return f"RestartingDataset(dataset={self.dataset})"


def zero_loss_batch(batch: Any, ignore_index: int = -100) -> Any:
    """A copy of ``batch`` that contributes nothing to a loss: ``loss_mask`` all zero,
    ``labels`` all ``ignore_index``, and ``__key__`` / ``__keys__`` set to
    :data:`PADDING_KEY` per row.

    Works on attribute batches (``MultiModalBatch``) and on mappings (the batch formats).

    Raises:
        ConfigError: the batch has neither a ``loss_mask`` nor a ``labels`` tensor, so a
            filler cannot be made from it.
    """
    import torch

    filler = copy.deepcopy(batch)
    is_mapping = isinstance(filler, MutableMapping)

    def get(name: str) -> Any:
        return filler.get(name) if is_mapping else getattr(filler, name, None)

    def put(name: str, value: Any) -> None:
        if is_mapping:
            filler[name] = value
        else:
            setattr(filler, name, value)

    zeroed = False
    loss_mask = get("loss_mask")
    if isinstance(loss_mask, torch.Tensor):
        put("loss_mask", torch.zeros_like(loss_mask))
        zeroed = True
    labels = get("labels")
    if isinstance(labels, torch.Tensor):
        put("labels", torch.full_like(labels, ignore_index))
        zeroed = True
    if not zeroed:
        raise ConfigError(
            f"validation padding: a {type(batch).__name__} batch has no loss_mask or labels "
            "tensor, so no zero-loss filler batch can be made to even out the data-parallel "
            "ranks; set val_batches_per_evaluation to a number every rank reaches, or return "
            "batches with loss_mask / labels"
        )
    for name in ("__key__", "__keys__"):
        keys = get(name)
        if isinstance(keys, (list, tuple)):
            put(name, [PADDING_KEY] * len(keys))
        elif isinstance(keys, str):
            put(name, PADDING_KEY)
    return filler


def is_padding_batch(batch: Any) -> bool:
    """Whether ``batch`` is a filler made by :func:`zero_loss_batch`."""
    keys = batch.get("__key__", batch.get("__keys__")) if isinstance(batch, Mapping) else (
        getattr(batch, "__key__", None)
    )
    if isinstance(keys, str):
        return keys == PADDING_KEY
    return bool(keys) and all(key == PADDING_KEY for key in keys)


class ValidationLoader:
    """What ``val_dataloader()`` returns: see the module docstring.

    Args:
        dataloader: a finite Energon loader over a :class:`RestartingDataset` (built once; its
            workers persist between passes).
        pass_length: ``pass_length(local) -> agreed``: this rank's batch count of one pass in,
            the largest over the data-parallel ranks out (a collective).
        count_by_pass: count this rank's batches by reading a pass (packed or grouped
            batches), instead of Energon's ``len()`` (an upper bound for plain batching).
        batches_per_evaluation: ``val_batches_per_evaluation`` (``None``: one pass).
        template: returns a batch of the split to make fillers from, for a rank whose own
            part is empty (``None`` if the split is empty).
        ignore_index: the label of filler rows.
    """

    def __init__(
        self,
        dataloader: Any,
        *,
        pass_length: Callable[[int], int],
        count_by_pass: bool = False,
        batches_per_evaluation: int | None = None,
        template: Callable[[], Any] | None = None,
        ignore_index: int = -100,
    ) -> None:
        from energon_plugins.loading.errors_policy import SkipCounts

        self._dataloader = dataloader
        self._pass_length = pass_length
        self._count_by_pass = count_by_pass
        self.batches_per_evaluation = batches_per_evaluation
        self._template = template
        self.ignore_index = ignore_index
        self._counts = SkipCounts()
        self._length: int | None = None
        self._filler: Any = None

    @property
    def dataloader(self) -> Any:
        """The wrapped Energon loader."""
        return self._dataloader

    def skip_counts(self) -> dict[str, int]:
        """Samples skipped (by reason) in the current or last pass, all workers."""
        return self._counts.total()

    # ------------------------------------------------------------------ length
    def __len__(self) -> int:
        """Batches per evaluation, the same on every data-parallel rank.

        The first call agrees on the pass length over the DP group (a collective: call it
        on every rank, as Megatron and Lightning do); later calls return the cached value.
        """
        if self._length is None:
            if self.batches_per_evaluation is not None:
                self._length = self.batches_per_evaluation
            else:
                self._length = int(self._pass_length(self.local_pass_length()))
        return self._length

    def local_pass_length(self) -> int:
        """This rank's real batches in one pass (an upper bound when samples are skipped)."""
        if not self._count_by_pass:
            return len(self._dataloader)
        count = 0
        passes = self._real_batches()
        try:
            for batch in passes:
                count += 1
                if self._filler is None:
                    self._filler = zero_loss_batch(batch, self.ignore_index)
        finally:
            passes.close()
        return count

    # ------------------------------------------------------------------ iteration
    def _real_batches(self) -> Iterator[Any]:
        """One pass over this rank's part of the split (restarted from the beginning)."""
        self._counts.load(None)
        return self._counts.filter(frozen_for_pass(self._dataloader))

    def _next_filler(self) -> Any:
        if self._filler is None:
            batch = self._template() if self._template is not None else None
            if batch is None:
                raise DatasetError(
                    "the validation split yields no batch on any rank, so there is nothing to "
                    "evaluate; check the split (energon info PATH) or drop validation"
                )
            self._filler = zero_loss_batch(batch, self.ignore_index)
        return copy.deepcopy(self._filler)

    def one_pass(self) -> Iterator[Any]:
        """Exactly ``len(self)`` batches, from the start of the split: real, then fillers."""
        total = len(self)
        produced = 0
        real = self._real_batches()
        try:
            while produced < total:
                try:
                    batch = next(real)
                except StopIteration:
                    break
                if self._filler is None:
                    self._filler = zero_loss_batch(batch, self.ignore_index)
                produced += 1
                yield batch
            else:
                if self.batches_per_evaluation is None:
                    # A whole pass: read to its end, so the last skip counts arrive.
                    for _ in real:
                        logger.warning(
                            "validation: this rank's pass has more than the agreed %d batches "
                            "(a non-deterministic task encoder?); the rest is not evaluated",
                            total,
                        )
                        break
        finally:
            real.close()
        while produced < total:
            produced += 1
            yield self._next_filler()

    def __iter__(self) -> Iterator[Any]:
        """Evaluation after evaluation, forever (``next()`` never raises ``StopIteration``).

        Nothing is read (and no collective runs) before the first ``next()``.
        """
        return _Evaluations(self)

    def close(self) -> None:
        """Stop the loader's worker processes now (they also stop when it is collected)."""
        _shutdown_workers(self._dataloader)


class _Evaluations:
    """The never-ending iterator of :meth:`ValidationLoader.__iter__`."""

    def __init__(self, loader: ValidationLoader) -> None:
        self._loader = loader
        self._current: Iterator[Any] | None = None

    def __iter__(self) -> "_Evaluations":
        return self

    def __next__(self) -> Any:
        while True:
            if self._current is None:
                if len(self._loader) == 0:
                    raise DatasetError(
                        "the validation split is empty on every data-parallel rank: nothing to "
                        "evaluate (check the split, or do not build a validation loader)"
                    )
                self._current = self._loader.one_pass()
            try:
                return next(self._current)
            except StopIteration:
                self._current = None


def _shutdown_workers(dataloader: Any) -> None:
    """Shut down a torch loader's persistent workers (best effort)."""
    iterator = getattr(dataloader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    if iterator is not None:
        dataloader._iterator = None
