"""The savable packing stage of ``truncation: split``: parts of over-long samples across packs.

:class:`SplitPackingDataset` is the carry-over packing stage
(:class:`~energon_plugins.encoding.packing.carry_dataset.CarryOverPackingDataset`) whose planner
may name *parts* of buffer samples: ``(index, start, stop)`` token ranges. A planned part is
cut from its sample (:func:`~energon_plugins.encoding.packing.split_samples.sample_part`) and
kept under a part restore key ``("SplitPart", start, stop, base_restore_key)``; the rest of a
sample that waits for the next buffer is a carried part. Everything stays savable as restore
keys: the carried parts (the continuation of a sample) in the reading buffer, the planned parts
in the pending buffer, the parts of each emitted pack in its restore key. Restoring re-reads
the whole sample and cuts the same part again, so a loader restored mid-sample continues with
exactly the packs it would have given.
"""

from collections.abc import Callable, Sequence
from typing import Any

from megatron.energon.flavors.base_dataset import SavableDataset
from megatron.energon.worker import WorkerConfig
from megatron.energon.wrappers.buffer import SavableSampleBuffer

from energon_plugins.encoding.packing.carry_dataset import CarryOverPackingDataset
from energon_plugins.encoding.packing.split_samples import parse_part_key, part_key

__all__ = ["PartCutter", "SplitPackingDataset", "SplitPlanner"]

Item = tuple[int, int, int]
"""``(buffer index, start, stop)``: tokens ``[start, stop)`` of a buffer sample."""

SplitPlanner = Callable[[list[Any], list[int], bool], tuple[list[list[Item]], list[Item]]]
"""``planner(samples, carry_counts, flush) -> (groups, carried)``, as the carry-over
:data:`~energon_plugins.encoding.packing.carry_dataset.Planner`, but each entry is an
:data:`Item`; ``(i, 0, len)`` is the whole sample ``i``. The items of one sample are disjoint;
a sample with no item was dropped (the planner counts it)."""

PartCutter = Callable[..., Any]
"""``cut(sample, start, stop, base_offset=..., base_key=...) -> part`` (the encoder's
``split_part``); must be a pure function of its arguments (restore replays it)."""


def restore_member(dataset: SavableDataset, restore_key: Any, cut: PartCutter) -> Any:
    """A sample or a part from its restore key: parts re-read the whole sample and cut it."""
    parsed = parse_part_key(restore_key)
    if parsed is None:
        return dataset.restore_sample(restore_key)
    start, stop, base = parsed
    part = cut(dataset.restore_sample(base), start, stop)
    part.__restore_key__ = restore_key
    return part


class PartBuffer(SavableSampleBuffer):
    """A savable sample buffer whose restore keys may name parts of samples."""

    def __init__(self, dataset: SavableDataset, *, cut: PartCutter, worker_config: WorkerConfig) -> None:
        self.cut = cut
        super().__init__(dataset, worker_config=worker_config)

    def restore_sample(self, restore_key: Any) -> Any:
        """The sample or part ``restore_key`` names."""
        return restore_member(self.dataset, restore_key, self.cut)


class SplitPackingDataset(CarryOverPackingDataset):
    """The carry-over packing stage whose packs may hold parts of over-long samples.

    Args:
        dataset: the encoded samples (each with a restore key).
        cut: see :data:`PartCutter`.
        planner: see :data:`SplitPlanner`.
        **kwargs: as :class:`CarryOverPackingDataset` (``buffer_size``, ``final_packer``, ...).
    """

    def __init__(
        self, dataset: SavableDataset, *, cut: PartCutter, planner: SplitPlanner, **kwargs: Any
    ) -> None:
        self.cut = cut
        self.split_planner = planner
        super().__init__(dataset, planner=planner, **kwargs)  # type: ignore[arg-type]  # items, not indices

    def reset_state_own(self) -> None:
        """Empty part-aware buffers and fresh sample indices."""
        super().reset_state_own()
        self._reading_buffer = PartBuffer(self.dataset, cut=self.cut, worker_config=self.worker_config)
        self._pending_buffer = PartBuffer(self.dataset, cut=self.cut, worker_config=self.worker_config)

    def _member(self, samples: list[Any], keys: list[Any], item: Item) -> tuple[Any, Any]:
        """The sample or part ``item`` names, and its restore key."""
        index, start, stop = item
        sample, key = samples[index], keys[index]
        if (start, stop) == (0, sample.length):
            return sample, key
        parsed = parse_part_key(key)
        offset = parsed[0] if parsed is not None else 0
        base_key = str(sample.__key__)
        if parsed is not None:  # a part's __key__ ends with its offsets
            base_key = base_key.removesuffix(f"[{parsed[0]}:{parsed[1]}]")
        part = self.cut(sample, start, stop, base_offset=offset, base_key=base_key)
        new_key = part_key(key, start, stop)
        part.__restore_key__ = new_key
        return part, new_key

    def _plan(self, flush: bool) -> None:
        """Plan the reading buffer: planned parts go to the pending buffer, carried parts stay."""
        samples = list(self._reading_buffer.buffer)
        keys = list(self._reading_buffer.restore_key())
        counts = list(self._carry_counts)
        with self._plan_sample_index.ctx():
            groups, carried = self.split_planner(samples, counts, flush)
        check_split_plan(groups, carried, [int(s.length) for s in samples], flush)
        for group in groups:
            if group:
                members = [self._member(samples, keys, item) for item in group]
                self._pending_buffer.extend([m for m, _ in members], [k for _, k in members])
                self._pending_sizes.append(len(members))
        kept = [self._member(samples, keys, item) for item in carried]
        self._reading_buffer.clear()
        self._reading_buffer.extend([m for m, _ in kept], [k for _, k in kept])
        self._carry_counts = [counts[index] + 1 for index, _, _ in carried]

    def restore_member(self, restore_key: Any) -> Any:
        """One sample or part of a pack, from its restore key."""
        return restore_member(self.dataset, restore_key, self.cut)

    def config(self) -> dict[str, Any]:
        """The configuration Energon compares on restore (the carry-over's, plus the cutter)."""
        return {**super().config(), "cut": self._function_config(self.cut)}


def check_split_plan(
    groups: Sequence[Sequence[Item]], carried: Sequence[Item], lengths: list[int], flush: bool
) -> None:
    """Every item within its sample, the items of one sample disjoint, none carried on flush."""
    taken: dict[int, list[tuple[int, int]]] = {}
    for index, start, stop in [item for group in groups for item in group] + list(carried):
        if not 0 <= index < len(lengths) or not 0 <= start < stop <= lengths[index]:
            raise ValueError(
                f"split planner: item ({index}, {start}, {stop}) is outside the buffer of "
                f"{len(lengths)} samples"
            )
        for other_start, other_stop in taken.setdefault(index, []):
            if start < other_stop and other_start < stop:
                raise ValueError(f"split planner: sample {index} has overlapping parts")
        taken[index].append((start, stop))
    if flush and carried:
        raise ValueError("split planner: carried parts on the final flush")
