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

    With ``device`` set, each batch is copied there one batch ahead on a side CUDA stream
    (:class:`~energon_plugins.loading.transfer.DevicePrefetcher`; a quiet no-op without CUDA). The
    state saved while a batch is held ahead is the state *before* that batch, so a restore
    continues exactly with the first batch the caller did not receive.

    Batches produced by the datamodule's loaders carry their workers' skip counts
    (:mod:`energon_plugins.loading.errors_policy`); :meth:`skip_counts` sums them.
    """

    def __init__(self, dataloader: Any, *, device: Any = None) -> None:
        """Wrap ``dataloader`` (an Energon ``SavableDataLoader`` or ``BasicDataLoader``)."""
        self._dataloader = dataloader
        self._iterator: Iterator[Any] | None = None
        self.device = device
        self._counts = _skip_counts()
        self._prefetching = False
        self._snapshot: Any = None

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

    def _pull(self) -> Iterator[Any]:
        """Cycle the loader; while prefetching, remember the state before every pull."""
        source = cyclic_iter(self._dataloader)
        while True:
            if self._prefetching:
                self._snapshot = self._loader_position()
            yield next(source)

    def _start(self) -> Iterator[Any]:
        if self.device is None:
            return cyclic_iter(self._dataloader)
        from energon_plugins.loading.transfer import DevicePrefetcher

        prefetcher = DevicePrefetcher(self._pull(), self.device)
        self._prefetching = prefetcher.active
        return prefetcher

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._start()
        while True:
            try:
                item = next(self._iterator)
            except AssertionError as exc:
                if EMPTY_REPEAT in str(exc):
                    raise _empty_worker_error(self._dataloader) from exc
                raise
            batch = self._counts.unwrap(item)
            if batch is not None:  # None: a counts-only item at the end of a pass
                return batch

    def skip_counts(self) -> dict[str, int]:
        """Samples skipped so far (by reason) in the part of the stream delivered, all workers."""
        return self._counts.total()

    # ------------------------------------------------------------------ state
    def _loader_position(self) -> Any:
        """What :meth:`save_state` needs to describe the loader as of now (cheap with workers)."""
        loader = self._dataloader
        if getattr(loader, "num_workers", 0) > 0 and hasattr(loader, "_worker_sample_counters"):
            return ("workers", list(loader._worker_sample_counters), loader._next_worker_id)
        save = getattr(loader, "save_state_rank", None)
        return ("state", save() if save is not None else None)

    def _energon_state(self, save: Any) -> Any:
        if not self._prefetching or self._snapshot is None:
            return save()
        if self._snapshot[0] == "state":
            return self._snapshot[1]
        # With workers, Energon's state is derived from the last sample index per worker and
        # the next worker id: describe the loader as it was before the batch held ahead.
        loader = self._dataloader
        now = (loader._worker_sample_counters, loader._next_worker_id)
        loader._worker_sample_counters = self._snapshot[1]
        loader._next_worker_id = self._snapshot[2]
        try:
            return save()
        finally:
            loader._worker_sample_counters, loader._next_worker_id = now

    def save_state(self) -> Any:
        """Return this rank's loader state: Energon's ``save_state_rank()`` and the skip counts.

        A dict (``{"energon": ..., "skip_counts": ...}``); pickle it, or save it with
        ``torch.save`` and load it with ``torch.load(..., weights_only=False)``.
        """
        save = getattr(self._dataloader, "save_state_rank", None)
        if save is None:
            raise LoaderStateError(
                f"{type(self._dataloader).__name__} is not savable (use get_savable_loader)"
            )
        return {
            STATE_KEY: self._energon_state(save),
            "skip_counts": self._counts.state(),
        }

    def restore_state(self, state: Any) -> None:
        """Restore a state from :meth:`save_state` (or a bare Energon ``save_state_rank()``).

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
        if isinstance(state, dict) and STATE_KEY in state:
            self._counts.load(state.get("skip_counts"))
            state = state[STATE_KEY]
        restore(state)


#: Energon's message when a worker of a repeating (training-style) loader has no samples.
EMPTY_REPEAT = "Cannot repeat empty dataset indefinitely"


def _empty_worker_error(loader: Any) -> Exception:
    from energon_plugins.errors import DatasetError

    config = getattr(loader, "worker_config", None)
    where = (
        f" (data-parallel rank {config.rank} of {config.world_size}, "
        f"{config.num_workers} worker(s) per rank)"
        if config is not None
        else ""
    )
    return DatasetError(
        "a loader worker got no samples of its split" + where + ": a repeating loader (the "
        "training split, or validation_mode='infinite') needs at least one sample per "
        "data-parallel rank x worker. Use fewer workers, add shards to the split, or, for "
        "validation, validation_mode='finite' (which handles splits of any size)"
    )


#: Key of Energon's own state in :meth:`EnergonDataloader.save_state`'s dict.
STATE_KEY = "energon"


def _skip_counts() -> Any:
    from energon_plugins.loading.errors_policy import SkipCounts

    return SkipCounts()


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
        self._counts = _skip_counts()

    def skip_counts(self) -> dict[str, int]:
        """Samples skipped (by reason) in the current or last pass, all workers."""
        return self._counts.total()

    @property
    def dataloader(self) -> Any:
        """The wrapped Energon loader."""
        return self._dataloader

    def __len__(self) -> int:
        """Batches in one pass (on this rank)."""
        return len(self._dataloader)

    def _pass(self) -> Iterator[Any]:
        self._counts.load(None)
        return self._counts.filter(self._dataloader)

    def __iter__(self) -> Iterator[Any]:
        return self._pass()

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._pass()
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            raise
