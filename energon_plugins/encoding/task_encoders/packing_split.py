"""Split packing for the task encoders: ``truncation: split`` plans parts of over-long samples.

:class:`SplitPlanningMixin` is the encoder's half of split packing (the packing stage is
:class:`~energon_plugins.encoding.packing.split_dataset.SplitPackingDataset`):

- :meth:`~SplitPlanningMixin.split_part` cuts a part from an encoded sample with the encoder's
  image and video token ids and ignore index
  (:func:`~energon_plugins.encoding.packing.split_samples.sample_part`);
- :meth:`~SplitPlanningMixin.plan_with_split` plans one buffer: a sample longer than the
  capacity is cut (:func:`~energon_plugins.encoding.packing.split_samples.split_points`, never
  inside an image or video) into full parts, each emitted now as a pack of its own, in order,
  and a last part carried into the next buffer, where it is packed with other samples by the
  strategy (on the final flush it is packed with this buffer). The samples that fit are planned
  by the strategy as usual (with ``carry_over``, the least-filled pack is carried too). A
  sample that cannot be split (an image longer than the pack, images that cannot be told
  apart) is dropped and counted under its reason (``split_media_too_long``,
  ``split_media_layout``).
"""

import collections
import logging
from typing import Any

from energon_plugins.encoding.packing.carry import split_carry
from energon_plugins.encoding.packing.split_samples import (
    SplitRefused,
    media_spans,
    sample_part,
    split_points,
)
from energon_plugins.encoding.samples import EncodedSample

logger = logging.getLogger("energon_plugins.encoding.task_encoders.packing")

Item = tuple[int, int, int]


class SplitPlanningMixin:
    """``truncation: split``: the planner and the part cutter of the split packing stage.

    Mixed into :class:`~energon_plugins.PluginTaskEncoder` through ``PackingMixin``; uses the
    selection half (``plan_buffer``, ``packing_length``, ``packing_capacity``, the packing
    options and statistics) and the encoder's ``options``, ``ignore_index`` and
    ``_error_counts``.
    """

    _error_counts: collections.Counter
    options: Any

    @property
    def split_enabled(self) -> bool:
        """Whether the encoder's ``truncation`` option is ``split``."""
        return getattr(getattr(self, "options", None), "truncation", None) == "split"

    def split_part(
        self, sample: EncodedSample, start: int, stop: int, base_offset: int = 0, base_key: str | None = None
    ) -> EncodedSample:
        """The part ``[start, stop)`` of ``sample`` (see
        :func:`~energon_plugins.encoding.packing.split_samples.sample_part`)."""
        return sample_part(
            sample,
            start,
            stop,
            image_token_id=getattr(self, "image_token_id", None),
            video_token_id=getattr(self, "video_token_id", None),
            ignore_index=int(self.ignore_index),  # type: ignore[attr-defined]
            base_offset=base_offset,
            base_key=base_key,
            audio_token_id=getattr(self, "audio_token_id", None),
        )

    def split_ranges(self, sample: EncodedSample) -> list[tuple[int, int]]:
        """The parts ``sample`` is cut into (each checked by cutting it).

        Raises:
            SplitRefused: the sample cannot be split.
        """
        spans = media_spans(
            sample,
            getattr(self, "image_token_id", None),
            getattr(self, "video_token_id", None),
            getattr(self, "audio_token_id", None),
        )
        ranges = split_points(int(sample.length), spans, self.packing_capacity)  # type: ignore[attr-defined]
        for start, stop in ranges:
            self.split_part(sample, start, stop)
        return ranges

    def plan_with_split(
        self, samples: list[EncodedSample], carry_counts: list[int], flush: bool
    ) -> tuple[list[list[Item]], list[Item]]:
        """The split planner: ``(groups to emit, parts to carry)`` for one buffer, as items
        ``(index, start, stop)`` (see
        :data:`~energon_plugins.encoding.packing.split_dataset.SplitPlanner`)."""
        host: Any = self
        capacity = host.packing_capacity
        heads: list[list[Item]] = []
        fitting: list[Item] = []
        rests: list[Item] = []
        for index, sample in enumerate(samples):
            length = int(sample.length)
            if host.packing_length(sample) <= capacity:
                fitting.append((index, 0, length))
                continue
            try:
                ranges = self.split_ranges(sample)
            except SplitRefused as refused:
                self._count_split_refused(sample, refused)
                continue
            heads.extend([[(index, start, stop)] for start, stop in ranges[:-1]])
            (fitting if flush else rests).append((index, *ranges[-1]))
        parts = [
            samples[i]
            if (start, stop) == (0, samples[i].length)
            else self.split_part(samples[i], start, stop)
            for i, start, stop in fitting
        ]
        groups: list[list[int]] = host.plan_buffer(parts)[0] if parts else []
        carried: list[int] = []
        if not flush and host._packing_option("carry_over"):
            max_carries = int(host._packing_option("max_carries"))
            groups, carried = split_carry(
                groups,
                [host.packing_length(p) for p in parts],
                capacity,
                min_fill=float(host._packing_option("min_fill")),
                max_groups=int(host._packing_option("carry_max_groups")),
                pinned=[j for j, (i, _, _) in enumerate(fitting) if carry_counts[i] >= max_carries],
            )
        stats = host._packing_stats()
        stats["buffers"] += 1
        stats["carried"] += len(carried) + len(rests)
        stats["split_parts"] += (
            len(heads) + len(rests) + sum(1 for i, a, b in fitting if (a, b) != (0, samples[i].length))
        )
        emitted = heads + [[fitting[j] for j in group] for group in groups]
        stats["packs"] += len(emitted)
        stats["samples"] += sum(len(group) for group in emitted)
        stats["tokens"] += sum(stop - start for group in emitted for _, start, stop in group)
        return emitted, [fitting[j] for j in carried] + rests

    def _count_split_refused(self, sample: EncodedSample, refused: SplitRefused) -> None:
        self._error_counts[refused.reason] += 1
        logger.warning(
            "packing: sample %s (%d tokens) skipped, it cannot be split across packs: %s (totals so far: %s)",
            getattr(sample, "__key__", "?"),
            int(sample.length),
            refused,
            {k: v for k, v in self._error_counts.items() if k.startswith("split_")},
        )
