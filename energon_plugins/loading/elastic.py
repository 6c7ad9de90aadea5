"""Restoring a loader on another number of ranks or workers: every partition's exact state.

A loader's stream is a fixed set of data partitions (:mod:`energon_plugins.loading.partitions`).
A loader built without partitions is the special case P = ranks x workers: its worker ``w`` of
rank ``r`` *is* partition ``r x max(W, 1) + w`` (V = W), so its saved state converts without
loss. Given the list of every old rank's state (index = old data-parallel rank),
:func:`partition_states` returns each partition's state with the number of outputs to replay
(``skip``): Energon's worker checkpoint is older than what the main process consumed, and the
main process recorded the last consumed index of every partition (``positions``), so the
replay is exact per partition, with no interleaving order to reconstruct.

Every input that does not add up (a rank missing or twice, states of different runs, a
partition in two ranks, a checkpoint ahead of what was consumed) is refused by name: a missing
partition must never default to a fresh start, which would repeat its data silently.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from energon_plugins.config.settings import MAX_DATA_PARTITIONS, MAX_WORKERS
from energon_plugins.loading.checkpoint import STATE_KEY, StateMismatchError, fingerprint_differences, unwrap
from energon_plugins.loading.errors_policy import iter_leaves
from energon_plugins.loading.partitions import (
    find_interleaver_state,
    fresh_partition_state,
    owned_partitions,
    physical_workers,
)
from energon_plugins.loading.source_stats import copy_stats
from energon_plugins.loading.state_check import check_count_fields

MAX_RANKS = 1 << 20
"""Most data-parallel ranks a saved layout may name."""
LAYOUT_KEYS = ("dp_rank", "dp_world_size", "num_workers")
"""Fingerprint keys that may differ between the old run and this one."""
_ENERGON_WRAPPERS = (
    "SimpleSavableDatasetWrapper",
    "GcDataset",
    "WatchdogDataset",
    "FinishingWatchdogDataset",
)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a loader's stream is split: ``partitions`` P of ``virtual_workers`` V per virtual
    rank, read by ``dp_size`` ranks of ``num_workers`` workers (this is rank ``dp_rank``)."""

    partitions: int
    virtual_workers: int
    dp_size: int
    dp_rank: int
    num_workers: int
    partitioned: bool = True
    """False: a loader without partitions (P = ranks x workers, one per worker)."""

    def __post_init__(self) -> None:
        """Refuse values no run has: a layout may come from a state file (untrusted), and its
        numbers size loops and sets."""
        problems = [
            f"{name}={value!r}"
            for name, value, low, high in (
                ("dp_size", self.dp_size, 1, MAX_RANKS),
                ("num_workers", self.num_workers, 0, MAX_WORKERS),
                ("virtual_workers", self.virtual_workers, 0, MAX_WORKERS),
                ("partitions", self.partitions, 1, MAX_DATA_PARTITIONS if self.partitioned else None),
            )
            if not isinstance(value, int) or value < low or (high is not None and value > high)
        ]
        if not problems and not 0 <= self.dp_rank < self.dp_size:
            problems.append(f"dp_rank={self.dp_rank!r} of dp_size={self.dp_size}")
        if not problems and self.partitions % max(self.virtual_workers, 1):
            problems.append(
                f"partitions={self.partitions} not a multiple of virtual_workers={self.virtual_workers}"
            )
        if problems:
            raise StateMismatchError(f"a loader layout no run has: {', '.join(problems)}")

    @classmethod
    def plain(cls, dp_size: int, dp_rank: int, num_workers: int) -> "Layout":
        """The layout of a loader without partitions."""
        return cls(physical_workers(dp_size, num_workers), num_workers, dp_size, dp_rank, num_workers, False)

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any]) -> "Layout":
        """The layout a saved state records (:meth:`as_dict`)."""
        return cls(
            partitions=int(saved["partitions"]),
            virtual_workers=int(saved["virtual_workers"]),
            dp_size=int(saved["dp_size"]),
            dp_rank=int(saved["dp_rank"]),
            num_workers=int(saved["num_workers"]),
        )

    def as_dict(self) -> dict[str, int]:
        """The layout as saved (``partitioned`` is implied by the key being there)."""
        return {
            "partitions": self.partitions,
            "virtual_workers": self.virtual_workers,
            "dp_size": self.dp_size,
            "dp_rank": self.dp_rank,
            "num_workers": self.num_workers,
        }

    def describe(self) -> str:
        """``4 ranks x 2 workers (8 partitions)``."""
        return f"{self.dp_size} ranks x {self.num_workers} workers ({self.partitions} partitions)"

    def same_split(self, other: "Layout") -> bool:
        """Whether ``other`` splits the stream as this layout does (rank aside)."""
        return (self.partitions, self.virtual_workers, self.dp_size, self.num_workers) == (
            other.partitions,
            other.virtual_workers,
            other.dp_size,
            other.num_workers,
        )

    def owned(self) -> list[int]:
        """This rank's partitions, ascending."""
        return sorted(
            p
            for worker in range(max(self.num_workers, 1))
            for p in owned_partitions(self.partitions, self.dp_size, self.num_workers, self.dp_rank, worker)
        )


def only_layout_differs(differences: list[str]) -> bool:
    """Whether every fingerprint difference (``key: saved X, now Y``) is of a layout key
    (:data:`LAYOUT_KEYS`): the same run, read by another number of ranks or workers."""
    return all(line.split(":", 1)[0] in LAYOUT_KEYS for line in differences)


def position_of(state: Mapping[str, Any]) -> int:
    """The last output index the training loop received from a partition of ``state``
    (``{"sample_index", "skip", ...}``): the partition's checkpoint plus its replay, minus one."""
    return int(state["sample_index"]) + int(state["skip"]) - 1


def _energon_slots(energon: Any) -> list[Any]:
    return list(getattr(energon, "worker_states", None) or [])


def _with_workers(energon: Any) -> bool:
    from megatron.energon.savable_loader import SavableDatasetCheckpoint

    slots = _energon_slots(energon)
    return bool(slots) and isinstance(slots[0], SavableDatasetCheckpoint)


def layout_of(state: Any, index: int, count: int) -> Layout:
    """The layout that saved ``state``, element ``index`` of a list of ``count`` rank states."""
    if isinstance(state, dict) and isinstance(state.get("layout"), Mapping):
        return Layout.from_saved(state["layout"])
    energon = state.get(STATE_KEY) if isinstance(state, dict) else state
    for slot_state in _chain_states(energon):
        inner = find_interleaver_state(slot_state)
        if inner is not None:
            return Layout.from_saved(inner["layout"])
    fingerprint = state.get("fingerprint") if isinstance(state, dict) else None
    if isinstance(fingerprint, Mapping) and "dp_world_size" in fingerprint:
        return Layout.plain(
            int(fingerprint["dp_world_size"]), int(fingerprint["dp_rank"]), int(fingerprint["num_workers"])
        )
    workers = len(_energon_slots(energon)) if _with_workers(energon) else 0
    return Layout.plain(count, index, workers)


def _chain_states(energon: Any) -> list[Any]:
    """Each worker's saved chain (the dataset state inside Energon's per-worker slot)."""
    from megatron.energon.savable_loader import SavableDatasetCheckpoint

    chains = []
    for slot in _energon_slots(energon):
        if isinstance(slot, SavableDatasetCheckpoint):
            chains.append(None if slot.state is None else slot.state.dataset_state)
        else:
            chains.append(slot)
    return chains


def _partitioned_rank(state: Mapping[str, Any], layout: Layout, where: str) -> dict[int, dict[str, Any]]:
    """Exact partition states of a partitioned loader's saved state."""
    if "partition_states" in state:  # saved after an elastic restore, before its first batch
        return {int(p): dict(s) for p, s in state["partition_states"].items()}
    positions = {int(p): int(i) for p, i in (state.get("positions") or {}).items()}
    result: dict[int, dict[str, Any]] = {}
    energon = state.get(STATE_KEY)
    if energon is None or not _energon_slots(energon):  # never started: where it began
        return {p: fresh_partition_state() for p in layout.owned()}
    for chain in _chain_states(energon):
        inner = find_interleaver_state(chain)
        if inner is None:
            if chain is None:  # a worker that had not produced anything: fresh partitions
                continue
            raise StateMismatchError(
                f"{where}: a worker state without data partitions in a partitioned state"
            )
        for p, saved in inner["partitions"].items():
            skip = positions.get(int(p), -1) + 1 - int(saved["sample_index"])
            if skip < 0:
                raise StateMismatchError(
                    f"{where}: partition {p}'s checkpoint is {-skip} outputs ahead of what was consumed "
                    "(a corrupt state)"
                )
            # a pending restore's own skip is in the position already (position = index + skip - 1)
            result[int(p)] = {**saved, "skip": skip}
    for p in layout.owned():  # a worker whose slot was empty (it had not started)
        result.setdefault(p, fresh_partition_state())
    return result


def _legacy_rank(energon: Any, layout: Layout) -> dict[int, dict[str, Any]]:
    """Partition states of a loader without partitions: its worker ``w`` is partition
    ``rank x max(W, 1) + w``, and Energon's own offset is that partition's replay."""
    from megatron.energon.savable_loader import SavableDatasetCheckpoint

    result: dict[int, dict[str, Any]] = {}
    base = layout.dp_rank * max(layout.num_workers, 1)
    slots = _energon_slots(energon)
    for worker in range(max(layout.num_workers, 1)):
        partition = base + worker
        slot = slots[worker] if worker < len(slots) else None
        if isinstance(slot, SavableDatasetCheckpoint):
            wrapper = slot.state
            chain = None if wrapper is None else wrapper.dataset_state
            index = 0 if wrapper is None else int(wrapper.sample_index)
            skip = int(slot.offset)
        elif slot is None:
            chain, index, skip = None, 0, 0
        else:  # no worker processes: the main process's exact state
            chain, index, skip = slot, int(slot["_sample_index"]), 0
        while isinstance(chain, Mapping) and chain.get("__class__") in _ENERGON_WRAPPERS:
            chain = chain["datasets"][0] if "datasets" in chain else chain["dataset"]
        result[partition] = {"dataset": chain, "sample_index": index, "skip": skip, "exhausted": False}
    return result


def partition_states(
    states: Sequence[Any], fingerprint: Mapping[str, Any] | None
) -> tuple[Layout, dict[int, dict[str, Any]], dict[int, dict[str, int]], dict[int, Any]]:
    """``(old layout, {partition: state}, {partition: skip counts}, {partition: per-source
    counters})`` from every old rank's state.

    ``states[r]`` is old rank r's :meth:`~energon_plugins.loading.dataloader.EnergonDataloader.save_state`
    (or a Megatron-Bridge payload holding it, or Energon's bare state).

    Raises:
        StateMismatchError: a rank is missing or twice, the states come from different runs or
            from another setup than ``fingerprint`` (layout keys aside), a partition is missing
            or in two ranks, or a state is corrupt; the message names the rank and the field.
    """
    states = [unwrap(state) for state in states]
    for index, state in enumerate(states):
        check_count_fields(state, f"rank {index}'s loader state")
    if not states:
        raise StateMismatchError("an empty list of loader states: pass every old rank's save_state()")
    layouts = [layout_of(state, index, len(states)) for index, state in enumerate(states)]
    first = layouts[0]
    for index, layout in enumerate(layouts):
        if not layout.same_split(first):
            raise StateMismatchError(
                f"the loader states come from different runs: rank 0's was saved by {first.describe()}, "
                f"element {index}'s by {layout.describe()}"
            )
        if layout.dp_rank != index:
            raise StateMismatchError(
                f"element {index} of the list is rank {layout.dp_rank}'s state: pass every old rank's "
                "save_state() in rank order (index = old data-parallel rank)"
            )
    if len(states) != first.dp_size:
        raise StateMismatchError(
            f"{len(states)} loader states for a run of {first.dp_size} data-parallel ranks: pass every "
            "old rank's save_state() (index = old data-parallel rank)"
        )
    if fingerprint is not None:
        current = {k: v for k, v in fingerprint.items() if k not in LAYOUT_KEYS}
        for index, state in enumerate(states):
            saved = state.get("fingerprint") if isinstance(state, dict) else None
            if isinstance(saved, Mapping):
                differences = fingerprint_differences(
                    {k: v for k, v in saved.items() if k not in LAYOUT_KEYS}, current
                )
                if differences:
                    raise StateMismatchError(
                        f"rank {index}'s loader state was saved by a different setup; restoring it would "
                        "replay or skip data. Differences: " + "; ".join(differences)
                    )
    result: dict[int, dict[str, Any]] = {}
    counts: dict[int, dict[str, int]] = {}
    sources: dict[int, Any] = {}
    for index, (state, layout) in enumerate(zip(states, layouts, strict=True)):
        where = f"rank {index}'s loader state"
        if layout.partitioned:
            found = _partitioned_rank(state, layout, where)
        else:
            found = _legacy_rank(state.get(STATE_KEY) if isinstance(state, dict) else state, layout)
        for partition, partition_state in found.items():
            if partition in result:
                raise StateMismatchError(f"{where}: partition {partition} is also in another rank's state")
            result[partition] = partition_state
        saved_counts = (state.get("skip_counts") if isinstance(state, dict) else None) or {}
        saved_sources = (state.get("source_stats") if isinstance(state, dict) else None) or {}
        base = 0 if layout.partitioned else layout.dp_rank * max(layout.num_workers, 1)
        for key, value in saved_counts.items():
            counts[base + int(key)] = {str(r): int(n) for r, n in dict(value).items()}
        for key, value in saved_sources.items():
            sources[base + int(key)] = copy_stats(value)
    missing = sorted(set(range(first.partitions)) - set(result))
    if missing:
        raise StateMismatchError(
            f"no state for data partitions {missing[:8]}: the list of states is incomplete"
        )
    return first, result, counts, sources


def check_fits(old: Layout, dp_size: int, num_workers: int) -> None:
    """Refuse a layout with more workers than the old run's partitions.

    Raises:
        StateMismatchError: ``dp_size x max(num_workers, 1)`` exceeds the partitions.
    """
    need = physical_workers(dp_size, num_workers)
    if need > old.partitions:
        raise StateMismatchError(
            f"the loader states hold {old.partitions} data partitions ({old.describe()}); "
            f"{dp_size} ranks x {max(num_workers, 1)} workers = {need} need at least {need}: use at most "
            f"{old.partitions // dp_size or 1} workers per rank, or start a run with data_partitions >= {need}"
        )


def _leaf_states(chain: Any) -> list[Mapping[str, Any]]:
    """Every webdataset leaf's saved state inside a worker's saved chain."""
    found, stack = [], [chain]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if node.get("__class__") == "WebdatasetSampleLoaderDataset":
                found.append(node)
                continue
            stack.extend(v for v in node.values() if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend(node)
    return found


def legacy_layout_problems(energon: Any, loader: Any) -> list[str]:
    """Why a bare Energon state of a loader without partitions cannot be this loader's (empty
    when it can): each worker's saved epoch must have as many shard slices as the worker has
    under the current layout, and its open slices' positions must lie inside them.

    Energon itself restores a 4-rank state into a 2-rank loader without a word (and the run
    then repeats and drops data); the slices a worker reads change with the layout.
    """

    leaves = list(iter_leaves(getattr(loader, "dataset", None)))
    problems: list[str] = []
    for worker, chain in enumerate(_chain_states(energon)):
        saved_leaves = _leaf_states(chain)
        expected = []
        for leaf in leaves:
            offsets = leaf.workers_slice_offsets
            if worker >= len(offsets) or leaf.shuffle_over_epochs == -1:
                return []  # not comparable (worker count checked elsewhere; endless shuffling)
            expected.append((len(offsets[worker]) - 1) * max(leaf.shuffle_over_epochs or 1, 1))
        saved = []
        for state in saved_leaves:
            pending, done = state.get("_pending_slice_indexes"), state.get("_pending_slices_offset")
            if pending is None or done is None:
                return []  # the epoch had not started: nothing to compare
            saved.append(int(done) + len(pending))
        if sorted(saved) != sorted(expected):
            problems.append(
                f"worker {worker}: the saved epoch has {sorted(saved)} shard slices, this loader {sorted(expected)}"
            )
            continue
        if len(leaves) == 1 and len(saved_leaves) == 1:
            offsets = leaves[0].workers_slice_offsets[worker]
            for active in saved_leaves[0].get("_active_slice_state") or []:
                if active is None:
                    continue
                index, current = int(active.index), int(active.current)
                if index + 1 >= len(offsets) or not offsets[index] <= current <= offsets[index + 1]:
                    problems.append(
                        f"worker {worker}: a saved position ({current}) lies outside its shard slices"
                    )
                    break
    return problems
