"""Blend weights that change as a run goes (a curriculum), saved and restored with the loader.

Energon's ``BlendDataset`` draws each sample from its datasets with fixed weights (Energon
issue #208 asks for schedules). :class:`ScheduledBlendDataset` is that blend with a schedule:
stages ``(at, weights)`` where ``at`` counts the samples the whole run has drawn (every rank and
worker). Each worker (each data partition, with elastic resume) draws its own stream, so it
enters a stage when its own count reaches ``ceil(at / workers)``, ``workers`` being the
data-parallel size x ``max(num_workers, 1)`` of its worker config: the run as a whole switches
within one sample per worker of ``at``. The count is a savable field beside the blend's random
state, so a restored run continues in the same stage with the same draws.

:func:`schedule_blend` turns the ``BlendDataset`` that ``get_train_dataset`` built into one
(in place: the wrappers above keep references to it), mapping the metadataset's top-level entries (weights named by entry) to Energon's
flattened datasets: a nested metadataset's datasets keep their shares inside the entry.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from megatron.energon.flavors.base_dataset import add_sample_restore_key
from megatron.energon.wrappers.blend_dataset import BlendDataset

from energon_plugins.errors import ConfigError
from energon_plugins.loading.errors_policy import iter_leaves
from energon_plugins.loading.source_stats import normalized, source_names

Stages = Sequence[tuple[int, Sequence[float]]]


class ScheduledBlendDataset(BlendDataset):
    """A ``BlendDataset`` whose weights follow ``stages``: ``(at, weight per dataset)``, ``at``
    in samples of the whole run, increasing. Before the first stage, the given weights."""

    _savable_fields = ("exhausted", "_worker_rng", "_drawn")
    exhausted: list[bool]
    _drawn: int

    def __init__(self, *dataset_weights: tuple[Any, float], stages: Stages, worker_config: Any) -> None:
        self.stages = _stages(stages)
        super().__init__(*dataset_weights, worker_config=worker_config)

    @classmethod
    def adopt(cls, blend: BlendDataset, stages: Stages) -> ScheduledBlendDataset:
        """Turn the built ``blend`` itself into a scheduled one (the wrappers above it, such as
        the shuffle buffer's sample buffer, keep references to it, so it is changed in place
        rather than replaced); its state starts fresh."""
        if type(blend) is not BlendDataset:
            raise TypeError(f"expected Energon's BlendDataset, got {type(blend).__name__}")
        blend.__class__ = cls
        assert isinstance(blend, cls)
        blend.stages = _stages(stages)
        blend.reset_state_own()
        return blend

    def reset_state_own(self) -> None:
        """A fresh random state and no sample drawn yet."""
        super().reset_state_own()
        self._drawn = 0

    def _workers(self) -> int:
        config = self.worker_config
        return max(int(config.world_size), 1) * max(int(config.num_workers), 1)

    def local_starts(self) -> list[int]:
        """The own-sample counts at which this worker enters each stage."""
        workers = self._workers()
        return [math.ceil(at / workers) for at, _ in self.stages]

    def weights_now(self) -> tuple[float, ...]:
        """The weights of the stage this worker is in (the blend's own before the first)."""
        current: Sequence[float] = self.weights
        for start, (_, weights) in zip(self.local_starts(), self.stages, strict=True):
            if self._drawn >= start:
                current = weights
        return tuple(current)

    def __iter__(self) -> Iterator[Any]:
        assert self.worker_has_samples(), "Cannot blend all empty datasets"
        iterators: list[Any] = []
        for index, dataset in enumerate(self.datasets):
            has = dataset.worker_has_samples() and not self.exhausted[index]
            self.exhausted[index] = self.exhausted[index] or not dataset.worker_has_samples()
            iterators.append(iter(dataset) if has else None)
        starts = self.local_starts()
        while any(it is not None for it in iterators):
            stage_end = min((s for s in starts if s > self._drawn), default=None)
            probs = torch.tensor(
                [w if it is not None else 0.0 for w, it in zip(self.weights_now(), iterators, strict=True)],
                dtype=torch.float32,
            )
            while stage_end is None or self._drawn < stage_end:
                index = self._worker_rng.choice_idx(probs=probs)
                if iterators[index] is None:
                    break
                try:
                    sample = next(iterators[index])
                except StopIteration:
                    iterators[index] = None
                    self.exhausted[index] = True
                    break  # the weights change: recompute them
                self._drawn += 1
                yield add_sample_restore_key(sample, index, src=self)
        self.exhausted = [False] * len(self.datasets)

    def config(self) -> dict[str, Any]:
        """Energon's blend config, with the stages."""
        return {**super().config(), "stages": [[at, list(weights)] for at, weights in self.stages]}

    def __str__(self) -> str:
        return f"ScheduledBlendDataset(stages={len(self.stages)}, dataset_weights={self.dataset_weights})"


def _stages(stages: Stages) -> tuple[tuple[int, tuple[float, ...]], ...]:
    return tuple((int(at), tuple(float(w) for w in weights)) for at, weights in stages)


def _blends(dataset: Any) -> Iterator[BlendDataset]:
    """Every Energon ``BlendDataset`` under ``dataset``."""
    stack = [dataset]
    while stack:
        node = stack.pop()
        if type(node) is BlendDataset:
            yield node
            continue
        stack.extend(getattr(node, "datasets", ()) or ())


def _dataset_source(child: Any, names: Mapping[str, str]) -> str | None:
    for leaf in iter_leaves(child):
        readers = getattr(leaf, "join_readers", None) or ()
        for reader in readers:
            return names.get(normalized(getattr(reader, "base_path", "")))
    return None


def staged_weights(
    blend: BlendDataset,
    schedule: Sequence[tuple[int, Mapping[str, float]]],
    entry_of: Mapping[str, str],
    names: Mapping[str, str],
) -> list[tuple[int, list[float]]]:
    """Per stage, the weight of each of ``blend``'s datasets: its entry's stage weight times its
    share of the entry (its weight over the entry's datasets' weights in the metadataset).

    Raises:
        ConfigError: a dataset of the blend belongs to no entry (it cannot be scheduled).
    """
    entries = []
    for child in blend.datasets:
        source = _dataset_source(child, names)
        if source is None or source not in entry_of:
            raise ConfigError(
                f"blend_schedule: cannot tell which blend entry the dataset {child} belongs to; "
                "schedules need prepared (webdataset) leaves"
            )
        entries.append(entry_of[source])
    base = [float(w) for w in blend.weights]
    totals = {e: sum(w for w, f in zip(base, entries, strict=True) if f == e) for e in set(entries)}
    return [
        (at, [weights[entry] * w / totals[entry] for w, entry in zip(base, entries, strict=True)])
        for at, weights in schedule
    ]


def schedule_blend(
    dataset: Any,
    schedule: Sequence[tuple[int, Mapping[str, float]]],
    path: str,
    entry_sources: Mapping[str, Sequence[str]],
) -> int:
    """Make every ``BlendDataset`` under ``dataset`` (the training split of metadataset
    ``path``) a :class:`ScheduledBlendDataset` following ``schedule`` (``(at, {entry:
    weight})``; ``entry_sources``: entry -> its source names). Returns how many."""
    if not schedule:
        return 0
    names = source_names(path, "train")
    entry_of = {source: entry for entry, sources in entry_sources.items() for source in sources}
    blends = list(_blends(dataset))
    for blend in blends:
        ScheduledBlendDataset.adopt(blend, staged_weights(blend, schedule, entry_of, names))
    return len(blends)
