"""What the project's own wrapper stages share around Energon's pipeline, and the two of
Energon's own stages that loaders here replace (same state, same pickling)."""

import copy
import gc
import os
from collections.abc import Iterator
from typing import Any

from megatron.energon.watchdog import Watchdog
from megatron.energon.wrappers.gc_dataset import GcDataset
from megatron.energon.wrappers.watchdog_dataset import WatchdogDataset

from energon_plugins._stages import replace_stage_class


class TransparentRestore:
    """Restore for a wrapper stage that Energon's own pipeline does not have.

    A state saved without this stage (Energon's plain ``get_savable_loader(get_train_dataset(
    ...))``, as Megatron-Bridge's own datamodule builds it) restores the inner dataset, and the
    stage starts afresh; a state that has the stage restores as usual. Mixed in before
    Energon's ``BaseWrapperDataset``.
    """

    def restore_state(self, state: Any) -> None:
        """Restore ``state``, passing a state without this stage down to the inner dataset."""
        if state is not None and state.get("__class__") != type(self).__name__:
            self.reset_state_own()  # type: ignore[attr-defined]
            self.dataset.restore_state(state)  # type: ignore[attr-defined]
            return
        super().restore_state(state)  # type: ignore[misc]


def as_energon_state(state: Any, energon_class: type) -> Any:
    """``state`` saved by a stand-in for ``energon_class``, under Energon's class name: states
    interchange with Energon's plain loaders and with states saved before the swap."""
    state["__class__"] = energon_class.__name__
    return state


def from_energon_state(state: Any, energon_class: type, stand_in: type) -> Any:
    """``state`` (saved by ``energon_class`` or by its stand-in) for the stand-in to restore."""
    if state is not None and state.get("__class__") == energon_class.__name__:
        state = copy.copy(state)
        state["__class__"] = stand_in.__name__
    return state


class FinishingWatchdogDataset(WatchdogDataset):
    """Energon's ``WatchdogDataset``, whose watchdog thread ends with the iteration.

    Energon 7.4.1's ``__iter__`` starts a ``Watchdog`` thread and never calls its ``finish()``:
    the thread holds the stage (and through it the whole chain, shuffle buffer included) for
    the life of the process, about 40 MiB per discarded loader iterated in the main process.
    Here the thread ends when the iteration does, or when the iterator is closed or collected.
    """

    def __iter__(self) -> Iterator[Any]:
        if self.timeout_seconds is None:
            yield from self.dataset
            return
        watchdog = Watchdog(
            timeout=self.timeout_seconds,
            initial_timeout=self.initial_timeout_seconds,
            callback=self._watchdog_trigger,
            enabled=False,
        )
        try:
            yield from watchdog.watch_iter(self.dataset)
        finally:
            watchdog.finish()

    def save_state(self) -> Any:
        """Energon's state, under Energon's class name."""
        return as_energon_state(super().save_state(), WatchdogDataset)

    def restore_state(self, state: Any) -> None:
        """Restore a state saved by this class or by Energon's ``WatchdogDataset``."""
        super().restore_state(from_energon_state(state, WatchdogDataset, type(self)))


_FREEZING: dict[int, int] = {}
"""Iterations holding the garbage collector frozen, by process id (a forked worker has none)."""


class SharedFreezeGcDataset(GcDataset):
    """Energon's ``GcDataset``, whose freeze of the garbage collector is shared by the loaders
    of a process.

    Energon's ``__iter__`` runs ``gc.freeze()`` when an iteration starts and ``gc.unfreeze()``
    when it ends, for the whole process: with loaders in the main process (0 workers), the end
    of a validation pass unfroze the heap under the training loader, whose collections every
    10 batches then scanned every object of the process (0.2 s each in a small one; far more
    beside a model) for the rest of training. Here the heap is unfrozen when the last
    iteration of the process that froze it ends; the collection every ``every_n_iter``
    samples is Energon's. (Energon's check that loader workers ran ``gc_init_worker`` is not
    repeated: its loaders, the only ones built here, always run it.)
    """

    def __iter__(self) -> Iterator[Any]:
        if not self.freeze:
            yield from super().__iter__()
            return
        pid = os.getpid()
        gc.collect()
        gc.freeze()
        _FREEZING[pid] = _FREEZING.get(pid, 0) + 1
        try:
            count = 0
            for sample in self.dataset:
                yield sample
                count += 1
                if count >= self.every_n_iter:
                    gc.collect()
                    count = 0
        finally:
            _FREEZING[pid] -= 1
            if not _FREEZING[pid]:
                gc.unfreeze()

    def save_state(self) -> Any:
        """Energon's state, under Energon's class name."""
        return as_energon_state(super().save_state(), GcDataset)

    def restore_state(self, state: Any) -> None:
        """Restore a state saved by this class or by Energon's ``GcDataset``."""
        super().restore_state(from_energon_state(state, GcDataset, type(self)))


def replace_energon_stages(loader: Any) -> Any:
    """Give the ``WatchdogDataset`` and ``GcDataset`` stages of ``loader``'s chain the classes
    :class:`FinishingWatchdogDataset` and :class:`SharedFreezeGcDataset` (same state, same
    pickling); return ``loader``."""
    chain = getattr(loader, "dataset", None)
    replace_stage_class(chain, WatchdogDataset, FinishingWatchdogDataset)
    replace_stage_class(chain, GcDataset, SharedFreezeGcDataset)
    return loader
