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
  A plain ``for batch in dm.val_dataloader()`` never ends: past two whole evaluations it warns
  once (:class:`EndlessValidationWarning`), pointing at ``one_pass()``; Megatron's ``next()``
  calls on one iterator never warn.

Batches of a type of the user's own (a task encoder such as Energon's ``DefaultTaskEncoder``
returning, say, ``VQASample`` batches, without ``loss_mask`` or ``labels``) pass through
unchanged. A filler is made only when a rank really runs short; whether that can happen is
decided once, at the first pass, before any rank waits on another: when the ranks' passes
differ (or fall short of ``val_batches_per_evaluation``) and the batches cannot be zero-masked,
every rank raises the same :class:`~energon_plugins.ConfigError`, naming the encoder, the batch
type and the two ways out.

Restarting mid-pass is exact: :class:`RestartingDataset` resets the Energon pipeline at the
start of every iteration (Energon's datasets otherwise continue where an abandoned iteration
stopped).
"""

import copy
import dis
import logging
import sys
import warnings
from collections.abc import Callable, Generator, Iterator
from typing import Any

from megatron.energon.wrappers.base import BaseWrapperDataset

from energon_plugins.errors import ConfigError, DatasetError
from energon_plugins.loading.heap import frozen_for_pass
from energon_plugins.loading.padding import (  # noqa: F401 - re-exported (documented here)
    PADDING_KEY,
    can_zero_mask,
    is_padding_batch,
    zero_loss_batch,
)
from energon_plugins.loading.sample_failures import with_readable_errors

logger = logging.getLogger(__name__)

ENDLESS_AFTER_PASSES = 2
"""A ``for`` loop over the validation loader warns when it runs past this many evaluations."""


class EndlessValidationWarning(UserWarning):
    """A ``for`` loop over ``val_dataloader()`` ran past two evaluations: it never ends."""


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


class ValidationLoader:
    """What ``val_dataloader()`` returns: see the module docstring.

    ``iter()`` on it never ends (Megatron's evaluation calls ``next()`` on one iterator, as
    many times as it evaluates batches); for one evaluation in a loop of your own, iterate
    :meth:`one_pass`: ``for batch in loader.one_pass(): ...``.

    Args:
        dataloader: a finite Energon loader over a :class:`RestartingDataset` (built once; its
            workers persist between passes).
        pass_length: ``pass_length(local) -> agreed``: the largest of a number over the
            data-parallel ranks (a collective): this rank's batch count of one pass in, the
            longest rank's out.
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
        self._local_length: int | None = None  # this rank's real batches in a pass, if known
        self._settled = False  # whether the first pass decided how this rank pads
        self._filler_source: Any = None  # a real batch kept to make fillers from
        self._filler: Any = None
        self._warned_endless = False

    @property
    def dataloader(self) -> Any:
        """The wrapped Energon loader."""
        return self._dataloader

    def skip_counts(self) -> dict[str, int]:
        """Samples skipped (by reason) in the current or last pass, all workers."""
        return self._counts.total()

    def __repr__(self) -> str:
        length = self._length if self._length is not None else self.batches_per_evaluation
        shown = "not agreed yet" if length is None else str(length)
        return (
            f"ValidationLoader(batches per evaluation: {shown}; iter() never ends, as "
            "Megatron's evaluation needs: use .one_pass() for one evaluation)"
        )

    # ------------------------------------------------------------------ length
    def __len__(self) -> int:
        """Batches per evaluation, the same on every data-parallel rank.

        The first call agrees on the pass length over the DP group (a collective: call it
        on every rank, as Megatron and Lightning do); later calls return the cached value.

        Raises:
            RankTimeoutError: a data-parallel rank did not answer within
                ``ENERGON_PLUGINS_DATA_TIMEOUT`` seconds (the message names it; see
                :class:`~energon_plugins.loading.distributed.DataGroup`).
        """
        if self._length is None:
            if self.batches_per_evaluation is not None:
                self._length = self.batches_per_evaluation
            else:
                self._length = int(self._pass_length(self.local_pass_length()))
        return self._length

    def local_pass_length(self) -> int:
        """This rank's real batches in one pass (an upper bound when samples are skipped)."""
        if self._local_length is None:
            if self._count_by_pass:
                self._local_length = self._count_pass()
            else:
                self._local_length = len(self._dataloader)
        return self._local_length

    def _count_pass(self, limit: int | None = None) -> int:
        """Read one pass of this rank's part and count its batches (up to ``limit``)."""
        count = 0
        passes = self._real_batches()
        try:
            for _ in passes:
                count += 1
                if limit is not None and count >= limit:
                    break
        finally:
            passes.close()
        return count

    # ------------------------------------------------------------------ padding
    def _settle(self, total: int, first: Any) -> None:
        """Decide once, at the first pass, how this rank pads (see the module docstring).

        ``first`` is this rank's first real batch (``None``: it has none). Batches that can be
        zero-masked need no agreement: a rank that runs short pads. Batches that cannot: the
        ranks agree on the largest shortfall (the same collective on every rank, since every
        rank runs the same encoder) and all raise when any rank would run short.
        """
        batch = first if first is not None else self._template_batch()
        self._settled = True
        if batch is None:
            return  # the split is empty everywhere: _next_filler says so if a filler is due
        local = self._local_length
        if can_zero_mask(batch):
            # kept even when the counted length reaches ``total``: skipped samples can still
            # leave this rank short, and a template read later would encode (and count the
            # failures of) the first samples a second time
            self._filler_source = copy.deepcopy(batch)
            return
        if local is None:
            local = self._local_length = self._count_pass(limit=total)
        shortfall = int(self._pass_length(total - min(local, total)))
        if shortfall > 0:
            shortest = total - shortfall
            fix = f" (e.g. val_batches_per_evaluation={shortest}, which every rank reaches)"
            raise ConfigError(
                self._unpaddable(
                    batch,
                    f"a data-parallel rank has only {shortest} real batch(es) per pass where each "
                    f"evaluation takes {total} ({self._wanted()})",
                    fix if shortest > 0 else "",
                )
            )

    def _template_batch(self) -> Any:
        return self._template() if self._template is not None else None

    def _wanted(self) -> str:
        if self.batches_per_evaluation is not None:
            return f"val_batches_per_evaluation={self.batches_per_evaluation}"
        return "the longest data-parallel rank's pass"

    def _unpaddable(self, batch: Any, shortage: str, fix: str = "") -> str:
        """The message for a rank that runs short on batches that cannot be zero-masked."""
        batch_type = type(batch).__name__
        return (
            f"validation: task encoder {_encoder_name(self._dataloader)} returns {batch_type} "
            f"batches, which have no loss_mask or labels tensor, and {shortage}; the missing "
            f"batches would be zero-loss fillers, which cannot be made from a {batch_type}. "
            f"Either give every data-parallel rank the same number of validation batches{fix}, "
            "or return batches with a loss_mask or labels tensor (e.g. from a task encoder "
            "built on energon_plugins.PluginTaskEncoder)"
        )

    def _next_filler(self) -> Any:
        if self._filler is None:
            source = self._filler_source
            if source is None:
                source = self._template_batch()
            if source is None:
                raise DatasetError(
                    "the validation split yields no batch on any rank, so there is nothing to "
                    "evaluate; check the split (energon info PATH) or drop validation"
                )
            if not can_zero_mask(source):  # fewer batches than counted: samples were skipped
                raise ConfigError(
                    self._unpaddable(
                        source,
                        f"this rank ran out of real batches before the {len(self)} each "
                        f"evaluation takes ({self._wanted()}; samples were skipped)",
                    )
                )
            self._filler = zero_loss_batch(source, self.ignore_index)
            self._filler_source = None
        return copy.deepcopy(self._filler)

    # ------------------------------------------------------------------ iteration
    def _real_batches(self) -> Generator[Any, None, None]:
        """One pass over this rank's part of the split (restarted from the beginning)."""
        self._counts.load(None)
        return with_readable_errors(self._counts.filter(frozen_for_pass(self._dataloader)))

    def _open_pass(self, total: int) -> tuple[Generator[Any, None, None], Any]:
        """A new pass and its first batch (``None``: none); settles padding at the first."""
        real = self._real_batches()
        first = next(real, None)
        if first is None and self._local_length is None:
            self._local_length = 0
        if not self._settled:
            if first is not None and self._local_length is None and not can_zero_mask(first):
                # The decision needs this rank's count: read it, then start the pass again.
                real.close()
                self._local_length = self._count_pass(limit=total)
                real = self._real_batches()
                first = next(real, None)
            self._settle(total, first)
        return real, first

    def one_pass(self) -> Iterator[Any]:
        """Exactly ``len(self)`` batches, from the start of the split: real, then fillers."""
        total = len(self)
        produced = 0
        real, batch = self._open_pass(total)
        try:
            while produced < total and batch is not None:
                produced += 1
                yield batch
                batch = next(real, None) if produced < total else None
            if produced == total and self.batches_per_evaluation is None:
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

        Nothing is read (and no collective runs) before the first ``next()``. A ``for`` loop
        over it never ends: past two evaluations it warns once (use :meth:`one_pass`).
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
        self._delivered = 0

    def __iter__(self) -> "_Evaluations":
        return self

    def __next__(self) -> Any:
        while True:
            if self._current is None:
                length = len(self._loader)
                if length == 0:
                    raise DatasetError(
                        "the validation split is empty on every data-parallel rank: nothing to "
                        "evaluate (check the split, or do not build a validation loader)"
                    )
                if self._delivered >= ENDLESS_AFTER_PASSES * length:
                    self._warn_if_endless_loop(length)
                self._current = self._loader.one_pass()
            try:
                batch = next(self._current)
            except StopIteration:
                self._current = None
                continue
            self._delivered += 1
            return batch

    def _warn_if_endless_loop(self, length: int) -> None:
        """Warn once per loader when a ``for`` loop (not ``next()`` calls) starts a third
        evaluation: such a loop never ends."""
        if self._loader._warned_endless or not _called_by_for_loop(depth=3):
            return
        self._loader._warned_endless = True
        warnings.warn(
            f"this for loop over the validation loader has run {ENDLESS_AFTER_PASSES} whole "
            f"evaluations ({length} batches each) and never ends: iter(val_dataloader()) "
            "repeats the evaluation forever, as Megatron's evaluation (next() eval_iters times "
            "on one iterator) needs. For one evaluation, iterate val_dataloader().one_pass()",
            EndlessValidationWarning,
            stacklevel=3,
        )


def _called_by_for_loop(depth: int) -> bool:
    """Whether the frame ``depth`` levels up is executing a ``for`` loop's ``FOR_ITER``
    (iterating with ``for``), rather than a call such as ``next(iterator)``."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == dis.opmap["FOR_ITER"]


def _encoder_name(dataloader: Any) -> str:
    """The class name of the task encoder behind ``dataloader`` (found on the project's stages
    of its dataset chain)."""
    node = getattr(dataloader, "dataset", None)
    for _ in range(16):
        encoder = getattr(node, "encoder", None)
        if encoder is not None:
            return type(encoder).__name__
        node = getattr(node, "dataset", None)
        if node is None:
            break
    return "(unknown)"


def _shutdown_workers(dataloader: Any) -> None:
    """Shut down a torch loader's persistent workers (best effort)."""
    iterator = getattr(dataloader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    if iterator is not None:
        dataloader._iterator = None
