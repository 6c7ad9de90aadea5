"""Data partitions: a fixed number P of Energon streams that move between workers and ranks.

Partition ``p`` (0 <= p < P) is the Energon pipeline that *virtual* worker ``p`` of a virtual
layout of P / V ranks x V workers would run: the same shard slice (Energon's sharder with P
global workers), the same seeds (``worker_seed`` from ``p`` and the seed offset), its own shuffle
buffer, packing buffer, carry-over and skip counts. Its state does not depend on which physical
worker runs it, so it moves unchanged when the number of ranks or workers changes.

A physical worker ``g`` (``rank x max(W, 1) + local worker``, N in all) owns the partitions
``p % N == g`` and takes them in turn, in ascending order (:class:`InterleavedPartitionsDataset`,
the top of a rank's pipeline). With P = N and V = W every worker runs one partition, and that
partition *is* the pipeline Energon builds for that worker without partitions.

:class:`PartitionWorkerConfig` is the only code here that touches Energon's ``WorkerConfig``
class variables (:func:`outer_suspended` parks the physical worker's active config while a
partition's own config is active); it is tested against the pinned Energon 7.4.
"""

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from megatron.energon.flavors.base_dataset import FlexState, SavableDataset
from megatron.energon.worker import WorkerConfig

INTERLEAVER = "InterleavedPartitionsDataset"
"""The ``__class__`` recorded in the interleaver's saved state (found by :func:`find_interleaver_state`)."""


def physical_workers(dp_size: int, num_workers: int) -> int:
    """Workers over all ranks (a rank without worker processes counts as one)."""
    return dp_size * max(num_workers, 1)


def owned_partitions(
    partitions: int, dp_size: int, num_workers: int, rank: int, local_worker: int
) -> list[int]:
    """The partitions physical worker ``(rank, local_worker)`` runs, ascending.

    Raises:
        ValueError: there are more physical workers than partitions.
    """
    count = physical_workers(dp_size, num_workers)
    if count > partitions:
        raise ValueError(
            f"{count} workers ({dp_size} ranks x {max(num_workers, 1)}) but only {partitions} data "
            "partitions: every worker needs at least one"
        )
    worker = rank * max(num_workers, 1) + local_worker
    return list(range(worker, partitions, count))


class PartitionWorkerConfig(WorkerConfig):
    """The ``WorkerConfig`` of virtual worker ``partition`` in a layout of P / V ranks x V workers.

    It answers ``rank_worker_id()`` with its virtual worker id whatever process runs it, so
    Energon's sharding, seeds and sample indices are those of the virtual worker.
    """

    def __init__(
        self,
        partition: int,
        partitions: int,
        virtual_workers: int,
        *,
        seed_offset: int = 0,
        error_handler: Any = None,
    ) -> None:
        per_rank = max(virtual_workers, 1)
        if partitions % per_rank:
            raise ValueError(
                f"data partitions ({partitions}) must be a multiple of {per_rank} virtual workers"
            )
        extra = {} if error_handler is None else {"global_error_handler": error_handler}
        super().__init__(
            rank=partition // per_rank,
            world_size=partitions // per_rank,
            num_workers=virtual_workers,
            seed_offset=seed_offset,
            **extra,
        )
        self.partition = partition
        self.virtual_worker = partition % per_rank

    def rank_worker_id(self) -> int:
        """The virtual worker id (Energon's override, while restoring a sample, first)."""
        override = WorkerConfig._worker_override_global_rank
        if override is not None:
            return override % max(self.num_workers, 1)
        return self.virtual_worker

    def assert_worker(self) -> None:
        """Any process may run a partition."""


@contextlib.contextmanager
def outer_suspended() -> Iterator[Any]:
    """Park the physical worker's active ``WorkerConfig`` while a partition's is active; yields
    the worker's cache pool (the partition activates its config with it)."""
    outer = WorkerConfig.active_worker_config
    stack = WorkerConfig._sample_index_stack
    override = WorkerConfig._worker_override_global_rank
    pool = WorkerConfig._cache_pool
    WorkerConfig.active_worker_config = None
    WorkerConfig._sample_index_stack = None
    WorkerConfig._worker_override_global_rank = None
    try:
        yield pool
    finally:
        WorkerConfig.active_worker_config = outer
        WorkerConfig._sample_index_stack = stack
        WorkerConfig._worker_override_global_rank = override
        WorkerConfig._cache_pool = pool


def fresh_partition_state() -> dict[str, Any]:
    """The state of a partition that has not started."""
    return {"dataset": None, "sample_index": 0, "skip": 0, "exhausted": False}


class PartitionStream:
    """One partition's pipeline, iterated under its own ``WorkerConfig`` and sample index."""

    def __init__(self, partition: int, chain: SavableDataset, config: PartitionWorkerConfig) -> None:
        self.partition = partition
        self.chain = chain
        self.config = config
        self.sample_index = 0
        self.exhausted = False
        self._iterator: Iterator[Any] | None = None
        self._pending: dict[str, Any] | None = None

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restore ``{"dataset", "sample_index", "skip", "exhausted"}`` on first use: the chain's
        state, then ``skip`` outputs replayed (produced after that state and already consumed)."""
        self._pending = dict(state)
        self._iterator = None

    def save(self) -> dict[str, Any]:
        """This partition's state (a pending restore is saved as it is)."""
        if self._pending is not None:
            # a copy: restoring adopts (and then changes) the pending state's lists, which must
            # not reach a checkpoint Energon already holds
            return copy.deepcopy(self._pending)
        if self._iterator is None and self.sample_index == 0:
            return fresh_partition_state()
        return {
            "dataset": self.chain.save_state(),
            "sample_index": self.sample_index,
            "skip": 0,
            "exhausted": self.exhausted,
        }

    def _pull(self, pool: Any) -> Any:
        assert self._iterator is not None
        self.config.worker_activate(self.sample_index, cache_pool=pool)
        try:
            item = next(self._iterator)
        finally:
            self.config.worker_deactivate()
        self.sample_index += 1
        return item

    def _start(self, pool: Any) -> None:
        skip = 0
        if self._pending is not None:
            state, self._pending = self._pending, None
            if state["dataset"] is None:
                self.chain.reset_state_deep()
            else:
                self.chain.restore_state(state["dataset"])
            self.sample_index = int(state["sample_index"])
            self.exhausted = bool(state["exhausted"])
            skip = int(state["skip"])
        self._iterator = iter(self.chain)
        for _ in range(skip):
            try:
                self._pull(pool)
            except StopIteration:
                self.exhausted = True
                return

    def next(self, pool: Any) -> tuple[int, Any] | None:
        """``(index, item)`` of the next output, or None when the partition has ended."""
        if self._iterator is None:
            self._start(pool)
        if self.exhausted:
            return None
        index = self.sample_index
        try:
            item = self._pull(pool)
        except StopIteration:
            self.exhausted = True
            return None
        return index, item


class InterleavedPartitionsDataset(SavableDataset):
    """The top of a rank's pipeline: each physical worker takes its partitions in turn.

    Each output is a partition's :class:`~energon_plugins.loading.errors_policy.CountedBatch`,
    marked with its ``partition`` and the partition's own output ``index`` (what the main
    process records, so a saved state is exact per partition). ``layout`` (partitions,
    virtual_workers, dp_size, dp_rank, num_workers) is saved with the state, so a bare Energon
    state names the layout that wrote it.
    """

    def __init__(
        self,
        streams: Mapping[int, PartitionStream],
        owners: Callable[[int], list[int]],
        *,
        worker_config: WorkerConfig,
        layout: Mapping[str, int],
    ) -> None:
        super().__init__(worker_config=worker_config)
        self.layout = dict(layout)
        self.streams = dict(streams)
        self.owners = owners
        #: The partition chains, for code that walks a pipeline (``datasets``, as a blend has).
        self.datasets = [stream.chain for stream in self.streams.values()]
        self.reset_state_own()

    def reset_state_own(self) -> None:
        """Start again at this worker's first partition."""
        self._cursor = 0

    def _owned(self, local_worker: int | None = None) -> list[PartitionStream]:
        if local_worker is None:
            local_worker = self.worker_config.rank_worker_id()
        return [self.streams[p] for p in self.owners(local_worker)]

    def inject(self, states: Mapping[int, Mapping[str, Any]]) -> None:
        """Give the partitions their states (in the main process, before the workers start)."""
        for partition, state in states.items():
            self.streams[partition].restore(state)
        self._cursor = 0

    def __iter__(self) -> Iterator[Any]:
        owned = self._owned()
        while owned and not all(stream.exhausted for stream in owned):
            stream = owned[self._cursor % len(owned)]
            self._cursor = (self._cursor + 1) % len(owned)
            with outer_suspended() as pool:
                got = stream.next(pool)
            if got is None:
                continue
            index, item = got
            yield dataclasses.replace(item, worker=stream.partition, partition=stream.partition, index=index)

    def save_state(self) -> FlexState:
        """Cursor, layout and the state of each partition of this worker."""
        state = FlexState()
        state["__class__"] = INTERLEAVER
        state["cursor"] = self._cursor
        state["layout"] = dict(self.layout)
        state["partitions"] = {stream.partition: stream.save() for stream in self._owned()}
        return state

    def restore_state(self, state: FlexState | None) -> None:
        """Restore :meth:`save_state` (None: the initial state).

        Raises:
            ValueError: the state was saved by another layout.
        """
        if state is None:
            self.reset_state_deep()
            return
        if state.get("__class__") != INTERLEAVER or state.get("layout") != self.layout:
            raise ValueError(
                f"a loader state of layout {state.get('layout')} restored into {self.layout}: "
                "pass the list of every rank's state"
            )
        self._cursor = int(state["cursor"])
        for partition, partition_state in state["partitions"].items():
            self.streams[int(partition)].restore(partition_state)

    def len_worker(self, worker_idx: int | None = None) -> int:
        """Samples of this worker's partitions."""
        return sum(stream.chain.len_worker() for stream in self._owned(worker_idx))

    def worker_has_samples(self) -> bool:
        """Whether any partition of this worker has samples."""
        return any(stream.chain.worker_has_samples() for stream in self._owned())

    def config(self) -> dict[str, Any]:
        """The partitions and the physical worker config."""
        return {
            "type": type(self).__qualname__,
            "partitions": sorted(self.streams),
            "worker_config": self.worker_config.config(),
        }

    def __str__(self) -> str:
        return f"InterleavedPartitionsDataset(partitions={sorted(self.streams)}, layout={self.layout})"


def find_interleaver_state(state: Any) -> Any:
    """The interleaver's state inside a worker's saved chain (through Energon's wrappers), or
    None."""
    while isinstance(state, Mapping):
        if state.get("__class__") == INTERLEAVER:
            return state
        inner = state.get("datasets")
        state = inner[0] if isinstance(inner, list) and len(inner) == 1 else state.get("dataset")
    return None
