"""The loader wrapper the Megatron training loop iterates: cycling, with save and restore."""

from collections.abc import Iterable, Iterator
from typing import Any

from energon_plugins.errors import EnergonPluginsError


class LoaderStateError(EnergonPluginsError, RuntimeError):
    """The loader state was restored at a point where it can no longer take effect."""


def cyclic_iter(iterable: Iterable[Any]) -> Iterator[Any]:
    """Yield the items of ``iterable`` forever, starting it again each time it is exhausted.

    Raises:
        ValueError: a pass over ``iterable`` yielded nothing (so cycling would spin forever).
    """
    while True:
        yielded = False
        for item in iterable:
            yielded = True
            yield item
        if not yielded:
            raise ValueError(
                f"cyclic_iter: {type(iterable).__name__} yielded no items, cannot cycle an "
                "empty iterable (is the dataset split empty?)"
            )


class EnergonDataloader:
    """A wrapper to use a Megatron Energon loader with the Megatron-LM training loop.

    Iterating it cycles the underlying loader forever (``cyclic_iter``). The underlying
    iterator is created on the first ``__next__``, so :meth:`restore_state` can run after the
    wrapper is built and before the first batch, which is what Energon requires.
    """

    def __init__(self, dataloader: Any) -> None:
        """Wrap ``dataloader`` (an Energon ``SavableDataLoader`` or ``BasicDataLoader``)."""
        self._dataloader = dataloader
        self._iterator: Iterator[Any] | None = None

    @property
    def dataloader(self) -> Any:
        """The wrapped Energon loader."""
        return self._dataloader

    @property
    def started(self) -> bool:
        """Whether iteration has started (after which the state can no longer be restored)."""
        return self._iterator is not None

    def __iter__(self) -> "EnergonDataloader":
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = cyclic_iter(self._dataloader)
        return next(self._iterator)

    def save_state(self) -> Any:
        """Return this rank's loader state (Energon's ``save_state_rank()``).

        Pickle it, or save it with ``torch.save`` and load it with
        ``torch.load(..., weights_only=False)``.
        """
        save = getattr(self._dataloader, "save_state_rank", None)
        if save is None:
            raise LoaderStateError(
                f"{type(self._dataloader).__name__} is not savable (use get_savable_loader)"
            )
        return save()

    def restore_state(self, state: Any) -> None:
        """Restore a state from :meth:`save_state` (Energon's ``restore_state_rank``).

        Must be called before the first ``next()``; the following batches are then exactly
        those that followed the saved point, given the same dataset, task encoder, arguments
        and worker configuration.
        """
        if self._iterator is not None:
            raise LoaderStateError(
                "restore_state() must be called before iteration starts; this loader has "
                "already yielded batches. Build a fresh datamodule and restore into it."
            )
        restore = getattr(self._dataloader, "restore_state_rank", None)
        if restore is None:
            raise LoaderStateError(
                f"{type(self._dataloader).__name__} is not savable (use get_savable_loader)"
            )
        restore(state)


class FiniteDataloader:
    """A finite, reproducible loader: each pass yields the same batches in the same order.

    ``for batch in loader`` runs one full pass. ``next(loader)`` walks a pass too, for training
    loops that pull ``eval_iters`` batches per evaluation: at the end of the pass it raises
    ``StopIteration`` once and the following ``next`` starts a fresh, identical pass. With
    ``eval_iters == len(loader)`` every evaluation therefore sees exactly the same data.
    """

    def __init__(self, dataloader: Any) -> None:
        """Wrap a finite Energon loader (``get_loader(get_val_dataset(...))``)."""
        self._dataloader = dataloader
        self._iterator: Iterator[Any] | None = None

    @property
    def dataloader(self) -> Any:
        """The wrapped Energon loader."""
        return self._dataloader

    def __len__(self) -> int:
        """Batches in one pass (on this rank)."""
        return len(self._dataloader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._dataloader)

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = iter(self._dataloader)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            raise
