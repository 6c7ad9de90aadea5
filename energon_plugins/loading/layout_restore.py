"""Restoring a loader state saved by another number of ranks or workers (the loader's side).

:class:`LayoutRestore` is the part of
:class:`~energon_plugins.loading.dataloader.EnergonDataloader` that turns the list of every old
rank's state into this rank's share (:mod:`energon_plugins.loading.elastic` computes the
partition states), rebuilds the loader with data partitions when it needs them, and refuses a
single state, or a bare Energon state, saved by another layout.

:mod:`~energon_plugins.loading.elastic` (and Energon with it) is imported where it is used: the
loader module stays importable without Energon, as the CLI's light start needs.
"""

import copy
from typing import Any

from energon_plugins.loading.checkpoint import LoaderStateError, StateMismatchError

LIST_HINT = (
    "to continue on another number of ranks or workers, pass the list of every old rank's "
    "save_state() (index = old data-parallel rank), or load_checkpoint(DIR) on the folder of "
    "all ranks' files, or rewrite the files for the new size with `energon-plugins checkpoint "
    "redistribute`"
)


def list_hint(differences: list[str]) -> str:
    """``". To continue on another ..."`` (:data:`LIST_HINT`) when the fingerprint
    ``differences`` (``key: saved X, now Y``) are all of the layout, else ``""``."""
    from energon_plugins.loading.elastic import only_layout_differs

    if differences and only_layout_differs(differences):
        return f". {LIST_HINT[0].upper()}{LIST_HINT[1:]}"
    return ""


def describe_layout(layout: Any) -> str:
    if layout.partitioned:
        return f"rank {layout.dp_rank} of {layout.describe()}"
    return f"rank {layout.dp_rank} of {layout.dp_size} ranks x {layout.num_workers} workers"


class LayoutRestore:
    """Restore paths for states of other layouts (mixed into ``EnergonDataloader``; it sets
    ``layout``, ``_rebuild``, ``_interleaver``, ``_dataloader``, ``_positions``, ``_injected``,
    ``_counts`` and ``_restored``)."""

    layout: Any
    fingerprint: dict[str, Any] | None
    _rebuild: Any
    _interleaver: Any
    _dataloader: Any
    _positions: dict[int, int]
    _injected: dict[int, Any] | None
    _counts: Any
    _restored: bool

    def restore_state(self, state: Any) -> None:  # pragma: no cover - EnergonDataloader's
        raise NotImplementedError

    def _adopt_partitions(self, state: dict[str, Any]) -> bool:
        """For a partitioned state of this rank count and worker count: become the same
        partitioned loader. True when the state was restored here (saved before its first
        batch after a restore from another layout)."""
        if not self.take_saved_layout(state):
            return False
        if "partition_states" not in state:
            return False
        self._inject(
            {int(p): s for p, s in state["partition_states"].items()},
            state.get("skip_counts"),
            state.get("source_stats"),
        )
        return True

    def take_saved_layout(self, state: dict[str, Any]) -> bool:
        """Become the partitioned loader a partitioned ``state`` of this rank, rank count and
        worker count was saved by (its Energon part then has this loader's shape); False for
        a state without partitions.

        Raises:
            StateMismatchError: the state is of another rank, rank count or worker count.
        """
        from energon_plugins.loading.elastic import layout_of

        if "layout" not in state or self.layout is None:
            return False
        saved = layout_of(state, self.layout.dp_rank, self.layout.dp_size)
        if (saved.dp_size, saved.num_workers, saved.dp_rank) != (
            self.layout.dp_size,
            self.layout.num_workers,
            self.layout.dp_rank,
        ):
            raise StateMismatchError(
                f"this loader state was saved by rank {saved.dp_rank} of {saved.describe()}; this "
                f"loader is rank {self.layout.dp_rank} of {self.layout.dp_size} ranks x "
                f"{self.layout.num_workers} workers: {LIST_HINT}"
            )
        self._use_partitions(saved.partitions, saved.virtual_workers)
        return True

    def _use_partitions(self, partitions: int, virtual_workers: int) -> None:
        """Be the partitioned loader of ``partitions`` x ``virtual_workers`` (rebuilt if not)."""
        layout = self.layout
        if layout.partitioned and (layout.partitions, layout.virtual_workers) == (
            partitions,
            virtual_workers,
        ):
            return
        if layout.partitioned:  # data_partitions was set: the run must keep its partitions
            raise StateMismatchError(
                f"the loader states hold {partitions} data partitions; this loader was built with "
                f"data_partitions={layout.partitions}: set data_partitions to {partitions} or leave it out"
            )
        if self._rebuild is None:
            raise LoaderStateError(
                "this loader cannot be rebuilt with data partitions (build it with the datamodule)"
            )
        self._dataloader, self._interleaver, self.layout = self._rebuild(partitions, virtual_workers)
        self._positions = {p: -1 for p in self.layout.owned()}

    def _inject(self, states: dict[int, Any], counts: Any, sources: Any = None) -> None:
        """Give this rank's partitions their exact states, skip counts and per-source counters
        (before the workers start)."""
        from energon_plugins.loading.elastic import position_of

        mine = {p: states[p] for p in self.layout.owned()}
        self._interleaver.inject(copy.deepcopy(mine))
        self._injected = mine
        self._positions = {p: position_of(s) for p, s in mine.items()}
        counts = counts or {}
        self._counts.load({p: counts[p] for p in mine if p in counts})
        sources = sources or {}
        self._counts.sources.load({p: sources[p] for p in mine if p in sources})
        self._restored = True

    def _restore_ranks(self, states: list[Any]) -> None:
        """Restore this rank's share of every old rank's states (see :meth:`restore_state`)."""
        from energon_plugins.loading.elastic import check_fits, partition_states

        if self.layout is None:
            raise LoaderStateError(
                "restoring the list of every rank's state needs a loader built by the datamodule"
            )
        old, partitions, counts, sources = partition_states(states, self.fingerprint)
        now = self.layout
        if (old.dp_size, old.num_workers) == (
            now.dp_size,
            now.num_workers,
        ) and old.partitioned == now.partitioned:
            self.restore_state(states[now.dp_rank])
            return
        check_fits(old, now.dp_size, now.num_workers)
        self._use_partitions(old.partitions, old.virtual_workers)
        self._inject(partitions, counts, sources)

    def _check_layout(self, state: Any) -> None:
        """Refuse a bare Energon state saved by another layout (Energon itself accepts some)."""
        from energon_plugins.loading.elastic import layout_of, legacy_layout_problems

        if state is None or self.layout is None:
            return
        saved = layout_of(state, self.layout.dp_rank, self.layout.dp_size)
        if saved.partitioned or self.layout.partitioned:
            if saved.as_dict() != self.layout.as_dict() or saved.partitioned != self.layout.partitioned:
                raise StateMismatchError(
                    f"this Energon state was saved by {describe_layout(saved)}; this loader is "
                    f"{describe_layout(self.layout)}: {LIST_HINT}"
                )
            return
        problems = legacy_layout_problems(state, self._dataloader)
        if problems:
            raise StateMismatchError(
                "this Energon state was saved by another number of data-parallel ranks or workers "
                f"({'; '.join(problems[:3])}): {LIST_HINT}"
            )
