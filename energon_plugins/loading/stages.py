"""What the project's own wrapper stages share around Energon's pipeline."""

import copy
from collections.abc import Iterator
from typing import Any

from megatron.energon.watchdog import Watchdog
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
        """Energon's state, under Energon's class name (states interchange with its loaders)."""
        state = super().save_state()
        state["__class__"] = WatchdogDataset.__name__
        return state

    def restore_state(self, state: Any) -> None:
        """Restore a state saved by this class or by Energon's ``WatchdogDataset``."""
        if state is not None and state.get("__class__") == WatchdogDataset.__name__:
            state = copy.copy(state)
            state["__class__"] = type(self).__name__
        super().restore_state(state)


def finish_watchdogs(loader: Any) -> Any:
    """Give the ``WatchdogDataset`` stages of ``loader``'s chain the class
    :class:`FinishingWatchdogDataset` (same state, same pickling); return ``loader``."""
    replace_stage_class(getattr(loader, "dataset", None), WatchdogDataset, FinishingWatchdogDataset)
    return loader
