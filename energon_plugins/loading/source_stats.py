"""What the run trained on: counters per source, exact across workers and restores.

A sample's *source* is the metadataset leaf's ``path`` as written in the metadataset YAML (for
a single dataset, the ``path`` the datamodule was given): :func:`source_names` walks the
metadataset once at build time (resolved leaf path -> written path), and each sample's Energon
``SourceInfo`` (its dataset path) is mapped back through it.

Counters per source (:data:`COUNTERS`), from each collated batch before its format runs
(:class:`SourceStatsDataset`, in the worker):

- ``samples``: sub-samples (a packed row of three samples counts three);
- ``tokens``: real (non-padding) tokens; ``loss_tokens``: positions whose ``loss_mask`` is on;
- ``image_tokens`` / ``video_tokens``: the placeholder-expanded vision tokens (positions
  holding the encoder's ``image_token_id`` / ``video_token_id``; without one, the batch's
  per-image counts of the row, attributed to the row's first source); ``audio_tokens``:
  positions holding the encoder's ``audio_token_id`` (0 for an encoder without one);
- ``padding``: a row's positions that are no sample's real token (its tail, and any padding
  inside packed sub-sequences), attributed to the row's **first** source;
- ``packs``: rows of packed batches (those with ``packed_seq_params``) holding the source, once
  per row;
- ``skipped``: ``{reason: count}`` of samples Energon could not decode or read (errors whose
  ``SourceInfo`` names the dataset, truncated shards). Skips by the task encoder carry no
  source and appear only in ``skip_counts()``.

The counters travel like the skip counts (:mod:`energon_plugins.loading.errors_policy`): each
worker's cumulative counters are a savable field of ``SkipCountingDataset``, ride with every
batch, and the main process keeps the latest per worker and sums them (:class:`SourceTotals`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from megatron.energon.wrappers.base import BaseWrapperDataset

from energon_plugins.encoding.batch_formats.sources import (
    ROW_SOURCES,
    UNKNOWN,
    dataset_name,
    sub_sample_infos,
)

COUNTERS = (
    "samples",
    "tokens",
    "loss_tokens",
    "image_tokens",
    "video_tokens",
    "audio_tokens",
    "padding",
    "packs",
)
"""The integer counters of every source (besides ``skipped``)."""

Stats = dict[str, dict[str, Any]]
"""``{source: {counter: int, "skipped": {reason: int}}}``."""


def empty_counters() -> dict[str, Any]:
    """One source's counters, all zero."""
    return {**{name: 0 for name in COUNTERS}, "skipped": {}}


def normalized(path: Any) -> str:
    """A dataset path as a lookup key: a URL without its trailing ``/``, else the real path."""
    text = str(path)
    if "://" in text:
        return text.rstrip("/")
    return os.path.realpath(os.path.expanduser(text))


def source_names(path: str, split: str) -> dict[str, str]:
    """``{normalized dataset path: source name}`` of the dataset or metadataset ``path``.

    A metadataset's leaves of ``split`` (nested metadatasets followed) are named by their
    ``path`` as their YAML writes it; a single dataset by ``path`` as given.
    """
    if not str(path).endswith((".yaml", ".yml")):
        return {normalized(path): str(path)}
    from energon_plugins.config.blend_walk import walk_split
    from energon_plugins.errors import DatasetError

    try:
        leaves = walk_split(path, split).leaves
    except DatasetError:  # the loader reports an unreadable metadataset itself
        return {}
    names: dict[str, str] = {}
    for leaf in leaves:
        names.setdefault(normalized(leaf.path), leaf.written)
    return names


class SourceCounter:
    """One process's cumulative counters per source (a worker's, or the main process's with
    ``num_workers=0``); shared by :class:`SourceStatsDataset` (batches) and the skip tracker
    (skips), saved by ``SkipCountingDataset``."""

    def __init__(self, names: Mapping[str, str], encoder: Any = None) -> None:
        self.names = dict(names)
        self.image_token_id = _token_id(encoder, "image_token_id")
        self.video_token_id = _token_id(encoder, "video_token_id")
        self.audio_token_id = _token_id(encoder, "audio_token_id")
        self.stats: Stats = {}
        self._named: dict[str, str] = {}

    def name(self, info: Any) -> str:
        """The source of a ``SourceInfo`` (its dataset path when no leaf matches)."""
        path = dataset_name(info)
        if path == UNKNOWN:
            return UNKNOWN
        found = self._named.get(path)
        if found is None:
            found = self._named[path] = self.names.get(normalized(path), path)
        return found

    def _of(self, source: str) -> dict[str, Any]:
        counters = self.stats.get(source)
        if counters is None:
            counters = self.stats[source] = empty_counters()
        return counters

    def count_skip(self, reason: str, sources: Any) -> None:
        """Count one skipped sample under ``reason`` for the source of ``sources`` (its first
        ``SourceInfo``; nothing without one)."""
        infos = list(sources or ())
        if not infos:
            return
        skipped = self._of(self.name(infos[0]))["skipped"]
        skipped[reason] = skipped.get(reason, 0) + 1

    def count_shard_skip(self, reason: str, dataset_path: Any) -> None:
        """Count one skipped sample of the dataset at ``dataset_path`` (a truncated shard)."""
        if dataset_path is None:
            return
        source = self.names.get(normalized(dataset_path), str(dataset_path))
        skipped = self._of(source)["skipped"]
        skipped[reason] = skipped.get(reason, 0) + 1

    def count_batch(self, batch: Any) -> None:
        """Add a collated batch to the counters and set its per-row sources (:data:`ROW_SOURCES`)."""
        if not hasattr(batch, "input_ids") or not hasattr(batch, "__key__"):
            return  # not a collated batch of this project: nothing known to count
        rows = [[self.name(info) for info in row] for row in sub_sample_infos(batch)]
        try:
            setattr(batch, ROW_SOURCES, rows)
        except (AttributeError, TypeError):  # pragma: no cover - a frozen batch type
            pass
        counts = batch_counts(batch, rows, self.image_token_id, self.video_token_id, self.audio_token_id)
        for source, counters in counts.items():
            mine = self._of(source)
            for name in COUNTERS:
                mine[name] += counters[name]

    def state(self) -> Stats:
        """A copy of the counters (plain containers)."""
        return copy_stats(self.stats)

    def load(self, stats: Mapping[str, Any] | None) -> None:
        """Replace the counters by ``stats`` (``None``: zero)."""
        self.stats = copy_stats(stats or {})


def _token_id(encoder: Any, attr: str) -> int | None:
    value = getattr(encoder, attr, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def copy_stats(stats: Mapping[str, Any]) -> Stats:
    """A deep copy of ``{source: counters}`` with every counter present."""
    out: Stats = {}
    for source, counters in stats.items():
        mine = empty_counters()
        for name in COUNTERS:
            mine[name] = int(counters.get(name, 0))
        mine["skipped"] = {str(r): int(n) for r, n in dict(counters.get("skipped") or {}).items()}
        out[str(source)] = mine
    return out


def _segments(batch: Any, row: int, width: int, subs: int) -> list[tuple[int, int, int]]:
    """``(start, laid-out length, real length)`` of the row's first ``subs`` sub-sequences."""
    params = batch.packed_seq_params
    if params is None:
        mask = batch.attention_mask
        real = int(mask[row].sum()) if mask is not None else width
        return [(0, real, real)]
    real_cu = torch.as_tensor(params.cu_seqlens_q).reshape(-1).tolist()
    laid = params.cu_seqlens_q_padded
    laid_cu = torch.as_tensor(laid).reshape(-1).tolist() if laid is not None else real_cu
    begin, end = row * width, (row + 1) * width
    found: list[tuple[int, int, int]] = []
    for index in range(len(laid_cu) - 1):
        start = int(laid_cu[index])
        if start < begin:
            continue
        if start >= end or len(found) == subs:
            break
        length = int(laid_cu[index + 1]) - start
        found.append((start - begin, length, int(real_cu[index + 1]) - int(real_cu[index])))
    return found


def _row_vision(batch: Any, counts_attr: str, per_row_attr: str) -> list[int]:
    """Vision tokens per row from the batch's per-image (per-video) counts (0 when unknown)."""
    counts, per_row = getattr(batch, counts_attr, None), getattr(batch, per_row_attr, None)
    rows = int(batch.input_ids.shape[0])
    if counts is None or per_row is None:
        return [0] * rows
    flat = torch.as_tensor(counts).reshape(-1).tolist()
    out, cursor = [], 0
    for n in torch.as_tensor(per_row).reshape(-1).tolist():
        out.append(int(sum(flat[cursor : cursor + int(n)])))
        cursor += int(n)
    return out


def batch_counts(
    batch: Any,
    rows: list[list[str]],
    image_token_id: int | None = None,
    video_token_id: int | None = None,
    audio_token_id: int | None = None,
) -> Stats:
    """The counters of one collated batch per source (see the module docstring);
    ``rows``: the source of each sub-sample of each row."""
    out: Stats = {}
    width = int(batch.input_ids.shape[1])
    packed = batch.packed_seq_params is not None
    vision = {
        "image_tokens": (image_token_id, _row_vision(batch, "image_token_counts", "num_images")),
        "video_tokens": (video_token_id, _row_vision(batch, "video_token_counts", "num_videos")),
    }
    for row, sources in enumerate(rows):
        if not sources:
            continue
        for source in sources:
            out.setdefault(source, empty_counters())
        segments = _segments(batch, row, width, len(sources))
        real_total = 0
        for index, (start, laid, real) in enumerate(segments):
            source = sources[min(index, len(sources) - 1)]
            counters = out[source]
            counters["samples"] += 1
            counters["tokens"] += real
            real_total += real
            counters["loss_tokens"] += int((batch.loss_mask[row, start : start + laid] > 0).sum())
            ids = batch.input_ids[row, start : start + real]
            for name, (token_id, _) in vision.items():
                if token_id is not None:
                    counters[name] += int((ids == token_id).sum())
            if audio_token_id is not None:
                counters["audio_tokens"] += int((ids == audio_token_id).sum())
        for extra in sources[len(segments) :]:  # sub-samples the layout did not show apart
            out[extra]["samples"] += 1
        first = out[sources[0]]
        first["padding"] += width - real_total
        for name, (token_id, per_row) in vision.items():
            if token_id is None:
                first[name] += per_row[row]
        if packed:
            for source in dict.fromkeys(sources):
                out[source]["packs"] += 1
    return out


class SourceStatsDataset(BaseWrapperDataset):
    """Counts every collated batch per source (in the worker, before the batch format) and
    gives it its per-row sources. Holds no state (``SkipCountingDataset`` saves the counter) and
    leaves none: it saves and restores its inner dataset's state as its own, so loader states
    keep the shape they had before the stage existed."""

    _savable_fields = ()

    def __init__(self, dataset: Any, counter: SourceCounter) -> None:
        super().__init__(dataset, worker_config=dataset.worker_config)
        self.counter = counter

    def reset_state_own(self) -> None:
        """Nothing to reset here (the counter is reset with ``SkipCountingDataset``)."""

    def save_state(self) -> Any:
        """The inner dataset's state (the stage is invisible in loader states)."""
        return self.dataset.save_state()

    def restore_state(self, state: Any) -> None:
        """Restore the inner dataset's state."""
        self.dataset.restore_state(state)

    def len_worker(self, worker_idx: int | None = None) -> int:
        """The inner dataset's length."""
        return self.dataset.len_worker(worker_idx)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.dataset:
            self.counter.count_batch(batch)
            yield batch

    def restore_sample(self, restore_key: Any) -> Any:
        """The inner batch, with its per-row sources (not counted: it is not delivered twice)."""
        batch = self.dataset.restore_sample(restore_key)
        if hasattr(batch, "input_ids") and hasattr(batch, "__key__"):
            setattr(
                batch, ROW_SOURCES, [[self.counter.name(i) for i in row] for row in sub_sample_infos(batch)]
            )
        return batch

    def config(self) -> dict[str, Any]:
        """Transparent: the inner dataset's config."""
        return self.dataset.config()

    def __str__(self) -> str:
        return f"SourceStatsDataset(dataset={self.dataset})"


def count_sources(
    dataset: Any, tracker: Any, path: str, split: str, encoder: Any = None
) -> SourceStatsDataset:
    """Wrap ``dataset`` (the task encoder's batches) so they are counted per source of the
    (meta)dataset ``path``; the counter is shared with ``tracker`` (skips, saving)."""
    counter = SourceCounter(source_names(path, split), encoder)
    tracker.sources = counter
    return SourceStatsDataset(dataset, counter)


class SourceTotals:
    """Main-process side: the latest cumulative counters per worker, summed on demand."""

    def __init__(self) -> None:
        self.per_worker: dict[int, Stats] = {}

    def record(self, worker: int, stats: Mapping[str, Any] | None) -> None:
        """Keep ``stats``, the cumulative counters worker ``worker`` reported last."""
        if stats is not None:
            self.per_worker[int(worker)] = copy_stats(stats)

    def total(self) -> Stats:
        """``{source: counters}`` over all workers of this rank, sources sorted."""
        return sum_stats(self.per_worker.values())

    def state(self) -> dict[int, Stats]:
        """A copy of the per-worker counters (saved with the loader state)."""
        return {w: copy_stats(s) for w, s in self.per_worker.items()}

    def load(self, state: Mapping[Any, Mapping[str, Any]] | None) -> None:
        """Restore :meth:`state` (``None``: zero)."""
        self.per_worker = {int(w): copy_stats(s) for w, s in (state or {}).items()}


def sum_stats(parts: Any) -> Stats:
    """The sum of several ``{source: counters}``, sources sorted."""
    out: Stats = {}
    for stats in parts:
        for source, counters in stats.items():
            mine = out.setdefault(source, empty_counters())
            for name in COUNTERS:
                mine[name] += int(counters.get(name, 0))
            for reason, n in (counters.get("skipped") or {}).items():
                mine["skipped"][reason] = mine["skipped"].get(reason, 0) + int(n)
    return {source: out[source] for source in sorted(out)}
