"""Sequence packing for :class:`~energon_plugins.PluginTaskEncoder`: the packing mixin.

:class:`PackingMixin` implements Energon's packing hooks with the selected packing strategy
(``context.packing``):

- ``select_samples_to_pack(samples)`` asks the strategy for a plan over the packing buffer,
  using each sample's packed length (its length rounded up to ``pad_to_multiple_of``) and the
  capacity ``seq_length``. Every sample lands in exactly one group, except overlong samples
  under ``overlong: drop``; dropped and truncated samples are counted in
  :meth:`~energon_plugins.PluginTaskEncoder.error_counts` (``packing_overlong_dropped``,
  ``packing_overlong_truncated``; ``packing_left_out`` for a fitting sample that a
  ``select``-only strategy put in no group) and logged. A strategy that fails, uses an index
  twice or overfills a pack stops the loader (``FatalSampleError``).
- ``pack_selected_samples(samples)`` (``@stateless``) first finishes the samples' deferred work
  (``complete_samples``: the image pixels of samples whose lengths were planned from the image
  sizes, processed together into one tensor), then concatenates tokens, labels, loss masks,
  pixel values, image grids and image counts into one :class:`PackedSample` whose
  ``seq_lengths`` are the sub-sequence lengths (each padded to ``pad_to_multiple_of``) and
  ``real_seq_lengths`` the unpadded ones.
- ``finish_packed_batch(samples, batch)`` (called at the end of ``batch``) gives every batch of
  packed rows megatron-core ``PackedSeqParams(qkv_format="thd")``, with
  ``cu_seqlens_q_padded`` / ``cu_seqlens_kv_padded`` when ``pad_to_multiple_of`` > 1.
- ``build_batch``: with ``carry_over: true`` the packing stage is a
  :class:`~energon_plugins.encoding.packing.carry_dataset.CarryOverPackingDataset` instead of Energon's
  ``PackingDataset``: the least-filled pack of each buffer is carried into the next buffer.

The packing options (``overlong``, ``pad_to_multiple_of``, ``carry_over``, ``min_fill``,
``max_carries``, ``carry_max_groups``) live in the strategy's options
(:class:`energon_plugins.encoding.packing.options.PackingOptions`), so a config selects them with the
strategy: ``packing: {name: first-fit-decreasing, options: {carry_over: true}}``.
"""

import collections
import logging
import math
from typing import Any

import torch
from megatron.energon import edataclass, stateless
from megatron.energon.errors import FatalSampleError
from megatron.energon.task_encoder.base import get_failure_tolerance, get_stateless
from megatron.energon.wrappers.packing_dataset import PackingDataset

from energon_plugins._stages import replace_stage_class
from energon_plugins.errors import ConfigError
from energon_plugins.encoding.packing.carry import split_carry
from energon_plugins.encoding.packing.options import PackingOptions
from energon_plugins.encoding.packed_seq import packed_seq_params
from energon_plugins.encoding.packing.parallel import parallel_pad_multiple
from energon_plugins.encoding.samples import EncodedSample

__all__ = ["PackedSample", "PackingMixin", "packed_seq_params"]

logger = logging.getLogger(__name__)

#: Reasons under which the packing stage counts samples in ``error_counts()``.
DROPPED = "packing_overlong_dropped"
TRUNCATED = "packing_overlong_truncated"
LEFT_OUT = "packing_left_out"
"""A sample that fits but a ``select``-only strategy put in no group (Energon discards it)."""


@edataclass
class PackedSample(EncodedSample):
    """Several encoded samples laid end to end in one row.

    Attributes:
        seq_lengths: the sub-sequence lengths as laid out (each padded to
            ``pad_to_multiple_of``); they sum to the row's length.
        real_seq_lengths: the unpadded sub-sequence lengths.
        sub_keys: the ``__key__`` of each sub-sequence, in order (``__key__`` joins them with
            commas).
    """

    real_seq_lengths: list[int] | None = None
    sub_keys: list[str] | None = None


def _round_up(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def _packed_token_fields(
    samples: list[EncodedSample], laid_out: list[int]
) -> dict[str, torch.Tensor] | None:
    """The samples' per-token fields end to end, each padded with 0 to its laid-out width."""
    keys = list(dict.fromkeys(k for s in samples if s.token_fields for k in s.token_fields))
    if not keys:
        return None
    out = {}
    for key in keys:
        dtype = next(
            s.token_fields[key].dtype for s in samples if s.token_fields and key in s.token_fields
        )
        row = torch.zeros(sum(laid_out), dtype=dtype)
        start = 0
        for sample, width in zip(samples, laid_out, strict=True):
            if sample.token_fields and key in sample.token_fields:
                row[start : start + sample.length] = sample.token_fields[key]
            start += width
        out[key] = row
    return out


class PackingMixin:
    """Energon's packing hooks, driven by the selected packing strategy.

    Mixed into :class:`~energon_plugins.PluginTaskEncoder` (before it in the bases); uses its
    ``packing``, ``seq_length``, ``pad_token_id``, ``ignore_index`` and ``_error_counts``.
    """

    packing: Any
    seq_length: int
    _error_counts: collections.Counter

    # ------------------------------------------------------------------ options
    @property
    def packing_options(self) -> Any:
        """The strategy's options (:class:`PackingOptions` defaults for a strategy without)."""
        options = getattr(self.packing, "options", None)
        return options if options is not None else PackingOptions()

    def _packing_option(self, name: str) -> Any:
        return getattr(self.packing_options, name, PackingOptions.model_fields[name].default)

    @property
    def packing_capacity(self) -> int:
        """Tokens per packed row: ``seq_length``."""
        return int(self.seq_length)

    @property
    def pad_to_multiple_of(self) -> int:
        """Each sub-sequence is padded to a multiple of this (1: no padding).

        The strategy's ``pad_to_multiple_of`` option, combined (least common multiple) with
        what the run's context and sequence parallelism need
        (:func:`~energon_plugins.encoding.packing.parallel.parallel_pad_multiple` of the build
        context's ``cp_size``, ``tp_size`` and ``sequence_parallel``).
        """
        option = int(self._packing_option("pad_to_multiple_of"))
        context = getattr(self, "context", None)
        parallel = parallel_pad_multiple(
            int(getattr(context, "cp_size", 1) or 1),
            int(getattr(context, "tp_size", 1) or 1),
            getattr(context, "sequence_parallel", None),
        )
        multiple = math.lcm(max(option, 1), parallel)
        if option < 1 or self.packing_capacity % multiple:
            source = f"pad_to_multiple_of ({option})"
            if parallel > 1:
                source += (
                    f" and the context/sequence parallelism (cp_size {context.cp_size}, tp_size "
                    f"{context.tp_size}: a multiple of {parallel})"
                )
            raise ConfigError(
                f"packing.options.pad_to_multiple_of: seq_length {self.packing_capacity} must be "
                f"a multiple of {multiple}, from {source}"
            )
        return multiple

    def packing_length(self, sample: EncodedSample) -> int:
        """The tokens ``sample`` takes in a pack: its length rounded up to the pad multiple."""
        return _round_up(int(sample.length), self.pad_to_multiple_of)

    def packing_counts(self) -> dict[str, int]:
        """Packing statistics of this process: buffers, samples, packs, real tokens, carried.

        ``tokens / (packs * packing_capacity)`` is the fill ratio of the packs emitted so far.
        """
        return dict(self._packing_stats())

    def _packing_stats(self) -> collections.Counter:
        stats = self.__dict__.get("_packing_counter")
        if stats is None:
            stats = self.__dict__["_packing_counter"] = collections.Counter()
        return stats

    # ------------------------------------------------------------------ planning
    def _strategy(self) -> Any:
        if self.packing is None:
            raise ConfigError(
                "packing_buffer_size is set but no packing strategy is selected: set "
                "packing: {name: first-fit-decreasing} (or another packing_strategy) or remove "
                "packing_buffer_size"
            )
        return self.packing

    def plan_buffer(self, samples: list[EncodedSample]) -> tuple[list[list[int]], list[int], list[int]]:
        """Plan one buffer with the strategy: ``(groups, dropped, truncated)`` as indices.

        A strategy without ``plan`` (only the ``select`` contract) is checked: an index used
        twice is an error, an index left out counts as dropped.
        """
        strategy = self._strategy()
        lengths = [self.packing_length(s) for s in samples]
        capacity = self.packing_capacity
        # Energon's packing stage logs and skips a failing pre-packer, which would lose the
        # whole buffer: a strategy error (overlong="error" included) stops the loader instead.
        try:
            if hasattr(strategy, "plan"):
                plan = strategy.plan(lengths, capacity)
                groups = [list(g) for g in plan.groups]
                dropped, truncated = list(plan.dropped), list(plan.truncated)
            else:
                groups = [list(g) for g in strategy.select(lengths, capacity)]
                truncated = [i for g in groups for i in g if lengths[i] > capacity]
                dropped = sorted(set(range(len(samples))) - {i for g in groups for i in g})
            used = [i for g in groups for i in g]
            if len(used) != len(set(used)) or not set(used) <= set(range(len(samples))):
                raise ValueError("a buffer index is used twice or out of range")
            for group in groups:
                if len(group) > 1 and sum(lengths[i] for i in group) > capacity:
                    raise ValueError(
                        f"group {group} holds {sum(lengths[i] for i in group)} tokens, more "
                        f"than the capacity {capacity}"
                    )
        except Exception as exc:  # noqa: BLE001 - re-raised as fatal, with the keys named
            overlong = [
                f"{getattr(samples[i], '__key__', i)!s} ({lengths[i]})"
                for i in range(len(samples))
                if lengths[i] > capacity
            ]
            raise FatalSampleError(
                f"packing strategy {strategy!r} failed on a buffer of {len(samples)} samples: "
                f"{exc}" + (f"; overlong samples (key (length)): {', '.join(overlong)}"
                            if overlong else "")
            ) from exc
        self._count_overlong(samples, lengths, dropped, truncated)
        return groups, dropped, truncated

    def _count_overlong(self, samples: list[Any], lengths: list[int], dropped: list[int],
                        truncated: list[int]) -> None:
        capacity = self.packing_capacity
        left_out = [i for i in dropped if lengths[i] <= capacity]
        dropped = [i for i in dropped if lengths[i] > capacity]
        for reason, indices, what in ((DROPPED, dropped, "dropped"),
                                      (TRUNCATED, truncated, "truncated to the capacity"),
                                      (LEFT_OUT, left_out, "left out by the strategy")):
            if not indices:
                continue
            self._error_counts[reason] += len(indices)
            logger.warning(
                "packing: %d sample(s) %s (capacity %d): %s (totals so far: %s)",
                len(indices), what, capacity,
                ", ".join(f"{getattr(samples[i], '__key__', i)!s} ({lengths[i]})" for i in indices),
                {k: v for k, v in self._error_counts.items() if k.startswith("packing_")},
            )

    def _count_emitted(self, samples: list[Any], groups: list[list[int]]) -> None:
        stats = self._packing_stats()
        capacity = self.packing_capacity
        stats["packs"] += len(groups)
        stats["samples"] += sum(len(g) for g in groups)
        stats["tokens"] += sum(min(int(samples[i].length), capacity) for g in groups for i in g)

    def select_samples_to_pack(self, samples: list[EncodedSample]) -> list[list[EncodedSample]]:
        """Group the packing buffer with the selected strategy (each sample exactly once).

        Samples longer than the capacity follow the strategy's ``overlong`` option and are
        counted; nothing else is left out.
        """
        groups, _, _ = self.plan_buffer(samples)
        stats = self._packing_stats()
        stats["buffers"] += 1
        self._count_emitted(samples, groups)
        return [[samples[i] for i in group] for group in groups]

    def plan_with_carry(
        self, samples: list[EncodedSample], carry_counts: list[int], flush: bool
    ) -> tuple[list[list[int]], list[int]]:
        """The carry-over planner: ``(groups to emit, indices to carry)`` for one buffer.

        Plans the buffer, then holds back up to ``carry_max_groups`` packs filled below
        ``min_fill`` (:func:`~energon_plugins.encoding.packing.carry.split_carry`); samples already
        carried ``max_carries`` times are pinned and go out now. ``flush`` carries nothing.
        """
        groups, _, _ = self.plan_buffer(samples)
        stats = self._packing_stats()
        stats["buffers"] += 1
        carried: list[int] = []
        if not flush:
            lengths = [self.packing_length(s) for s in samples]
            max_carries = int(self._packing_option("max_carries"))
            pinned = [i for i, count in enumerate(carry_counts) if count >= max_carries]
            groups, carried = split_carry(
                groups,
                lengths,
                self.packing_capacity,
                min_fill=float(self._packing_option("min_fill")),
                max_groups=int(self._packing_option("carry_max_groups")),
                pinned=pinned,
            )
        stats["carried"] += len(carried)
        self._count_emitted(samples, groups)
        return groups, carried

    # ------------------------------------------------------------------ packing
    def truncate_for_packing(self, sample: EncodedSample, capacity: int) -> EncodedSample:
        """Cut an overlong ``sample`` to ``capacity`` tokens.

        When the encoder knows its image token (``image_token_id``) and the cut would remove
        image tokens, the sample is cut before its first image token and keeps no image
        (images cannot be split); videos likewise by ``video_token_id``. Otherwise tokens are
        cut and the media kept. Override for a smarter cut.
        """
        cut = capacity
        pixel_values, grid, num_images = sample.pixel_values, sample.image_grid_thw, sample.num_images
        visual, counts = sample.visual, sample.image_token_counts
        num_videos, video_counts = sample.num_videos, sample.video_token_counts
        is_media = torch.zeros_like(sample.input_ids, dtype=torch.bool)
        for present, token_id in ((num_images, getattr(self, "image_token_id", None)),
                                  (num_videos, getattr(self, "video_token_id", None))):
            if present and isinstance(token_id, int):
                is_media |= sample.input_ids == token_id
        if bool(is_media[cut:].any()):  # media cannot be split: cut before the first, keep none
            cut = min(cut, int(is_media.nonzero()[0, 0]))
            pixel_values, grid, num_images, visual, counts = None, None, 0, None, []
            num_videos, video_counts = 0, []
        token_fields = (
            {key: value[:cut] for key, value in sample.token_fields.items()}
            if sample.token_fields
            else None
        )
        return EncodedSample.derive_from(
            sample,
            input_ids=sample.input_ids[:cut],
            labels=sample.labels[:cut],
            loss_mask=sample.loss_mask[:cut],
            pixel_values=pixel_values,
            image_grid_thw=grid,
            num_images=num_images,
            seq_lengths=[cut],
            truncated=True,
            visual=visual,
            token_fields=token_fields,
            image_token_counts=counts,
            num_videos=num_videos,
            video_token_counts=video_counts,
        )

    @stateless
    def pack_selected_samples(self, samples: list[EncodedSample]) -> PackedSample:
        """Concatenate one group into a :class:`PackedSample` (each part padded to the multiple).

        Padding tokens get the pad id, the ignore index as label and loss mask 0.
        """
        if not samples:
            raise ValueError("pack_selected_samples() got an empty group")
        capacity = self.packing_capacity
        multiple = self.pad_to_multiple_of
        pad_id, ignore = int(self.pad_token_id), int(self.ignore_index)  # type: ignore[attr-defined]
        samples, all_pixels = self.complete_samples(samples)  # type: ignore[attr-defined]
        if any(s.length > capacity for s in samples):
            all_pixels = None  # a cut may drop images: concatenate what is kept
            samples = [
                self.truncate_for_packing(s, capacity) if s.length > capacity else s
                for s in samples
            ]
        ids, labels, masks, real, laid_out = [], [], [], [], []
        for sample in samples:
            n = sample.length
            width = _round_up(n, multiple)
            pad = width - n
            ids.append(sample.input_ids.to(torch.long))
            labels.append(sample.labels.to(torch.long))
            masks.append(sample.loss_mask.to(torch.float32))
            if pad:
                ids.append(torch.full((pad,), pad_id, dtype=torch.long))
                labels.append(torch.full((pad,), ignore, dtype=torch.long))
                masks.append(torch.zeros(pad, dtype=torch.float32))
            real.append(n)
            laid_out.append(width)
        if sum(laid_out) > capacity:  # plan_buffer checks this; never skip samples silently
            raise FatalSampleError(
                f"pack of {len(samples)} samples takes {sum(laid_out)} tokens, more than the "
                f"capacity {capacity} (the packing strategy broke its contract)"
            )
        keys = [str(s.__key__) for s in samples]
        sources = tuple(src for s in samples for src in (s.__sources__ or ()))
        counts = [s.image_token_counts for s in samples]
        video_counts = [s.video_token_counts for s in samples]
        return PackedSample.derive_from(
            samples[0],
            __key__=",".join(keys),
            __sources__=sources or None,
            input_ids=torch.cat(ids),
            labels=torch.cat(labels),
            loss_mask=torch.cat(masks),
            pixel_values=self.combined_pixels(samples, all_pixels),  # type: ignore[attr-defined]
            image_grid_thw=self.combine_parts(  # type: ignore[attr-defined]
                "image_grid_thw", [s.image_grid_thw for s in samples]
            ),
            num_images=sum(int(s.num_images) for s in samples),
            seq_lengths=laid_out,
            real_seq_lengths=real,
            sub_keys=keys,
            truncated=any(bool(s.truncated) for s in samples),
            visual=self.combine_visual([s.visual for s in samples]),  # type: ignore[attr-defined]
            token_fields=_packed_token_fields(samples, laid_out),
            image_token_counts=None
            if any(c is None for c in counts)
            else [n for c in counts for n in c],  # type: ignore[union-attr]
            num_videos=sum(int(s.num_videos) for s in samples),
            video_token_counts=None
            if any(c is None for c in video_counts)
            else [n for c in video_counts for n in c],  # type: ignore[union-attr]
        )

    def finish_packed_batch(self, samples: list[EncodedSample], batch: Any) -> Any:
        """Give a collated batch of packed rows THD ``PackedSeqParams`` and no attention mask.

        ``PluginTaskEncoder.batch`` calls it last. The ``*_padded`` offsets are set whenever
        ``pad_to_multiple_of`` > 1. A batch without :class:`PackedSample` rows is returned as is.
        """
        if not any(isinstance(s, PackedSample) for s in samples):
            return batch
        width = int(batch.input_ids.shape[1])
        real_segments: list[int] = []
        padded_segments: list[int] = []
        for sample in samples:
            laid_out = list(sample.seq_lengths or [sample.length])
            real = list(getattr(sample, "real_seq_lengths", None) or laid_out)
            real_segments.extend(real)
            padded_segments.extend(laid_out)
            tail = width - sample.length
            if tail > 0:
                real_segments.append(tail)
                padded_segments.append(tail)
        batch.packed_seq_params = packed_seq_params(
            real_segments, padded_segments, always_padded=self.pad_to_multiple_of > 1
        )
        batch.attention_mask = None
        return batch

    # ------------------------------------------------------------------ the packing stage
    def build_batch(self, dataset: Any, *, batch_size: Any, batch_drop_last: bool = False,
                    packing_buffer_size: int | None = None, worker_config: Any) -> Any:
        """Energon's ``build_batch``; with ``carry_over`` the packing stage carries over.

        Without packing and batching (``batch_size=None``), a last stage finishes each
        sample's deferred work (``complete_samples``), which packing or ``batch`` does otherwise.
        """
        unbatched = batch_size is None and packing_buffer_size is None
        if packing_buffer_size is not None:
            self._strategy()
            self.pad_to_multiple_of  # noqa: B018 - validates seq_length against the multiple
        if packing_buffer_size is not None and self._packing_option("carry_over"):
            if self._is_overridden(self.postencode_sample):  # type: ignore[attr-defined]
                raise ConfigError(
                    f"packing.options.carry_over: {type(self).__name__} overrides "
                    "postencode_sample, which the carry-over packing stage does not support"
                )
            from energon_plugins.encoding.packing.carry_dataset import CarryOverPackingDataset

            default_tolerance = self.__default_failure_tolerance__  # type: ignore[attr-defined]
            dataset = CarryOverPackingDataset(
                dataset,
                buffer_size=packing_buffer_size,
                planner=self.plan_with_carry,
                final_packer=self.pack_selected_samples,
                final_packer_stateless=get_stateless(self.pack_selected_samples),
                worker_config=worker_config,
                final_packer_failure_tolerance=get_failure_tolerance(
                    self.pack_selected_samples, default_tolerance
                ),
                planner_failure_tolerance=get_failure_tolerance(
                    self.select_samples_to_pack, default_tolerance
                ),
            )
            packing_buffer_size = None
        dataset = super().build_batch(  # type: ignore[misc]
            dataset,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            worker_config=worker_config,
        )
        # no progress bar while a worker fills its first packing buffer
        replace_stage_class(dataset, PackingDataset, QuietPackingDataset)
        if unbatched:
            from megatron.energon.wrappers import MapDataset

            dataset = MapDataset(dataset, self.complete_unbatched, worker_config=worker_config,
                                 stateless_map_fn=True)
        return dataset

    @stateless
    def complete_unbatched(self, sample: EncodedSample) -> EncodedSample:
        """One sample with its deferred work done (the last stage of an unbatched loader)."""
        return self.complete_samples([sample])[0][0]  # type: ignore[attr-defined]


class QuietPackingDataset(PackingDataset):
    """Energon's ``PackingDataset`` whose buffer filling never draws a progress bar."""

    def _fill_reading_buffer(self, source_iter: Any, log_progress: bool = False) -> bool:
        return super()._fill_reading_buffer(source_iter, log_progress=False)
