"""The loader wrapper the Megatron training loop iterates: cycling, with save and restore."""

import copy
from collections.abc import Iterable, Iterator
from typing import Any

from energon_plugins.loading.checkpoint import (
    STATE_KEY,
    LoaderStateError,
    StateMismatchError,
    fingerprint_differences,
    mismatch_message,
    unwrap,
)
from energon_plugins.loading.heap import TrainingIterations
from energon_plugins.loading.layout_restore import LayoutRestore, list_hint
from energon_plugins.loading.state_check import check_count_fields


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


class EnergonDataloader(LayoutRestore):
    """A wrapper to use a Megatron Energon loader with the Megatron-LM training loop.

    Iterating it cycles the underlying loader forever (``cyclic_iter``). The underlying
    iterator is created on the first ``__next__``, so :meth:`restore_state` can run after the
    wrapper is built and before the first batch, which is what Energon requires.

    With ``device`` set, each batch is copied there one batch ahead on a side CUDA stream
    (:class:`~energon_plugins.loading.transfer.DevicePrefetcher`; a quiet no-op without CUDA). The
    state saved while a batch is held ahead is the state *before* that batch, so a restore
    continues exactly with the first batch the caller did not receive.

    Batches produced by the datamodule's loaders carry their workers' skip counts
    (:mod:`energon_plugins.loading.errors_policy`); :meth:`skip_counts` sums them. A sample
    that stops the loader raises one :class:`~energon_plugins.errors.SampleFailedError` naming
    the sample, the stage and the reason, also when a worker process raised it
    (:mod:`energon_plugins.loading.sample_failures`).

    ``fingerprint``: what produced the stream (see
    :func:`~energon_plugins.loading.checkpoint.loader_fingerprint`); saved with the state and
    compared on restore, so a state from another setup is refused with the differences named.

    ``layout`` (:class:`~energon_plugins.loading.elastic.Layout`) and ``rebuild`` (a callable
    ``rebuild(partitions, virtual_workers) -> (loader, interleaver, layout)``) come from the
    datamodule: with them :meth:`restore_state` also takes the list of every old rank's state
    and continues on another number of ranks or workers (see :mod:`energon_plugins.loading.elastic`).
    ``interleaver``: the top of a partitioned loader's pipeline, when it was built partitioned.
    """

    def __init__(
        self,
        dataloader: Any,
        *,
        device: Any = None,
        fingerprint: dict[str, Any] | None = None,
        layout: Any = None,
        rebuild: Any = None,
        interleaver: Any = None,
    ) -> None:
        """Wrap ``dataloader`` (an Energon ``SavableDataLoader`` or ``BasicDataLoader``)."""
        self._dataloader = dataloader
        self._iterator: Iterator[Any] | None = None
        self.device = device
        self.fingerprint = dict(fingerprint) if fingerprint is not None else None
        self._counts = _skip_counts()
        self._prefetching = False
        self._snapshot: Any = None
        self._restored = False
        self.layout = layout
        self._rebuild = rebuild
        self._interleaver = interleaver
        #: The last output index the caller received from each data partition of this rank.
        self._positions: dict[int, int] = {}
        if layout is not None and layout.partitioned:
            self._positions = {p: -1 for p in layout.owned()}
        self._injected: dict[int, Any] | None = None

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
        source = cyclic_iter(TrainingIterations(self._dataloader))
        while True:
            if self._prefetching:
                self._snapshot = self._loader_position()
            yield next(source)

    def _start(self) -> Iterator[Any]:
        if self.device is None:
            return cyclic_iter(TrainingIterations(self._dataloader))
        from energon_plugins.loading.transfer import DevicePrefetcher

        prefetcher = DevicePrefetcher(self._pull(), self.device)
        self._prefetching = prefetcher.active
        return prefetcher

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._start()
            # no restore after the first batch: let go of the datamodule the callback holds
            # (a cycle through it would keep Energon's watchdog thread and its chain alive)
            self._rebuild = None
        while True:
            try:
                item = next(self._iterator)
            except AssertionError as exc:
                if EMPTY_REPEAT in str(exc):
                    raise _empty_worker_error(self._dataloader) from exc
                if self._restored:
                    raise _restore_failed(exc) from exc
                raise
            except (IndexError, KeyError) as exc:
                if self._restored:
                    raise _restore_failed(exc) from exc
                raise
            except Exception as exc:
                clear = _readable_error(exc)
                if clear is None:
                    raise
                raise clear from exc
            self._restored = False
            partition = getattr(item, "partition", -1)
            if partition >= 0:
                self._positions[partition] = item.index
            batch = self._counts.unwrap(item)
            if batch is not None:  # None: a counts-only item at the end of a pass
                return batch

    def skip_counts(self) -> dict[str, int]:
        """Samples skipped so far (by reason) in the part of the stream delivered, all workers."""
        return self._counts.total()

    def stats(self) -> dict[str, dict[str, Any]]:
        """What the delivered part of the stream held, per source (cumulative, all workers):
        ``{source: {"samples", "tokens", "loss_tokens", "image_tokens", "video_tokens",
        "audio_tokens", "padding", "packs": int, "skipped": {reason: int}}}``.

        A source is the metadataset leaf's ``path`` as its YAML writes it (for a single
        dataset, the datamodule's ``path``); see :mod:`energon_plugins.loading.source_stats`.
        Restored with the state.
        """
        return self._counts.sources.total()

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

    def save_state(self) -> dict[str, Any]:
        """Return this rank's loader state.

        A plain dict, ``{"energon": <Energon's save_state_rank()>, "skip_counts": {worker:
        {reason: count}}, "source_stats": {worker: {source: counters}}, "fingerprint": {...}}``
        (``fingerprint`` when the datamodule built
        the loader). It holds only Python containers and scalars, NumPy arrays, torch tensors
        and Energon's state classes, so Megatron-Bridge's checkpointing (``torch.save``, then
        its restricted ``energon_torch_load``) round-trips it, as does
        :func:`~energon_plugins.loading.safe_load.load_state_file`.
        """
        save = getattr(self._dataloader, "save_state_rank", None)
        if save is None:
            raise LoaderStateError(
                f"{type(self._dataloader).__name__} is not savable (use get_savable_loader)"
            )
        state: dict[str, Any] = {
            STATE_KEY: self._energon_state(save),
            "skip_counts": self._counts.state(),
            "source_stats": self._counts.sources.state(),
        }
        if self.fingerprint is not None:
            state["fingerprint"] = dict(self.fingerprint)
        if self.layout is not None and self.layout.partitioned:
            state["layout"] = self.layout.as_dict()
            state["positions"] = dict(self._positions)
            if self._injected is not None and self._iterator is None:
                # restored from another layout and not started: Energon has no state of it yet
                state["partition_states"] = copy.deepcopy(self._injected)
        return state

    def restore_state(self, state: Any) -> None:
        """Restore a state from :meth:`save_state`, or a bare Energon ``save_state_rank()``
        (``None``: the initial state), or the list of every old rank's :meth:`save_state`
        (index = old data-parallel rank) to continue on another number of ranks or workers.

        Must be called before the first ``next()``; the following batches are then exactly
        those that followed the saved point, given the same dataset, task encoder, arguments
        and worker configuration. ``state`` itself is left unchanged (the loader restores from
        a copy), so the same state can restore another loader.

        A list restores this rank's share: every sample of the epoch in progress is then seen
        exactly once over all ranks (see :mod:`energon_plugins.loading.elastic`).

        Raises:
            LoaderStateError: iteration has started, or the loader is not savable.
            StateMismatchError: the state comes from another setup (its fingerprint, worker
                count or micro batch size differ), from another number of ranks or workers
                (pass the list of every rank's state), or is not a loader state; the message
                says what differs.
        """
        if self._iterator is not None:
            raise LoaderStateError(
                "restore_state() must be called before iteration starts; this loader has "
                "already yielded batches. Build a fresh datamodule and restore into it."
            )
        if isinstance(state, (list, tuple)):
            self._restore_ranks(list(state))
            return
        restore = getattr(self._dataloader, "restore_state_rank", None)
        if restore is None:
            raise LoaderStateError(
                f"{type(self._dataloader).__name__} is not savable (use get_savable_loader)"
            )
        counts = sources = None
        state = unwrap(state)  # a whole Megatron-Bridge file payload: the state inside
        check_count_fields(state, "the loader state")
        positions = None
        if isinstance(state, dict) and STATE_KEY in state:
            saved = state.get("fingerprint")
            if isinstance(saved, dict) and self.fingerprint is not None:
                differences = fingerprint_differences(saved, self.fingerprint)
                if differences:
                    raise StateMismatchError(
                        mismatch_message("the loader state", differences) + list_hint(differences)
                    )
            if self._adopt_partitions(state):
                return
            counts = state.get("skip_counts")
            sources = state.get("source_stats")
            positions = state.get("positions")
            state = state[STATE_KEY]
        self._check_layout(state)
        self._check_energon_state(state)
        try:
            # Energon adopts what it restores from (its buffers consume the saved lists): a copy
            # leaves the caller's state as it was, to restore again.
            restore(copy.deepcopy(state))
        except (AssertionError, IndexError, KeyError) as exc:
            raise _restore_failed(exc) from exc
        self._counts.load(counts)
        self._counts.sources.load(sources)
        if positions is not None:
            self._positions.update({int(p): int(i) for p, i in positions.items()})
        self._restored = state is not None

    def _check_energon_state(self, state: Any) -> None:
        """Refuse a state Energon would reject with a bare assertion, saying why."""
        if state is None:
            return
        from megatron.energon.savable_loader import SavableDataLoaderState

        if not isinstance(state, SavableDataLoaderState):
            what = (
                f"a dict with keys {sorted(map(str, state))[:8]}"
                if isinstance(state, dict)
                else f"a {type(state).__name__}"
            )
            raise StateMismatchError(
                f"not a loader state: expected what save_state() returns or Energon's "
                f"save_state_rank(), got {what}"
            )
        from megatron.energon.savable_loader import SavableDatasetCheckpoint

        workers = getattr(self._dataloader, "num_workers", 0) or 0
        slots = state.worker_states
        with_workers = bool(slots) and isinstance(slots[0], SavableDatasetCheckpoint)
        saved_workers = len(slots) if with_workers else 0
        if saved_workers != workers or (not with_workers and len(slots) != 1):
            raise StateMismatchError(
                mismatch_message("the loader state", [f"num_workers: saved {saved_workers}, now {workers}"])
            )
        if workers == 0 and state.micro_batch_size is not None:
            batch = getattr(self._dataloader, "_get_batch_size", lambda: None)()
            if batch is not None and batch != state.micro_batch_size:
                raise StateMismatchError(
                    mismatch_message(
                        "the loader state",
                        [f"micro_batch_size: saved {state.micro_batch_size}, now {batch}"],
                    )
                )

    def close(self) -> None:
        """Stop the loader's worker processes now (they also stop when it is collected)."""
        from energon_plugins.loading.validation import _shutdown_workers

        self._iterator = None
        _shutdown_workers(self._dataloader)


def _restore_failed(exc: BaseException) -> StateMismatchError:
    text = " ".join(str(exc).split())[-300:] or type(exc).__name__
    return StateMismatchError(
        "restoring the loader state failed: it was most likely saved by a different setup "
        "(task encoder, packing options such as carry_over, dataset or worker count); save "
        "and restore with save_checkpoint / load_checkpoint to have the differences named. "
        f"Energon said: {type(exc).__name__}: {text}"
    )


#: Energon's message when a worker of a repeating (training-style) loader has no samples.
EMPTY_REPEAT = "Cannot repeat empty dataset indefinitely"


def _empty_worker_error(loader: Any) -> Exception:
    from energon_plugins.errors import DatasetError

    config = getattr(loader, "worker_config", None)
    where = (
        f" (data-parallel rank {config.rank} of {config.world_size}, {config.num_workers} worker(s) per rank)"
        if config is not None
        else ""
    )
    return DatasetError(
        "a loader worker got no samples of its split" + where + ": a repeating loader (the "
        "training split, or validation_mode='infinite') needs at least one sample per "
        "data-parallel rank x worker. Use fewer workers, add shards to the split, or, for "
        "validation, validation_mode='finite' (which handles splits of any size)"
    )


def _readable_error(exc: BaseException) -> BaseException | None:
    """A worker's failure as one message (see :mod:`energon_plugins.loading.sample_failures`)."""
    from energon_plugins.loading.sample_failures import readable_error

    return readable_error(exc)


def _skip_counts() -> Any:
    from energon_plugins.loading.errors_policy import SkipCounts

    return SkipCounts()
