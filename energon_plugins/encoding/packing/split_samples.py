"""Split packing (``truncation: split``): an over-long sample cut into parts that fill packs.

A sample longer than the pack capacity is cut into *parts* of at most ``capacity`` tokens; each
part becomes its own sub-sequence of a pack (its own ``cu_seqlens`` segment, position ids from
0), and the parts appear in the packs in order. This module holds the pure pieces:

- :func:`media_spans` and :func:`split_points`: where a sample may be cut. A cut never falls
  inside an image (or video) token span: it moves back to the span's start. A span longer
  than the capacity makes the sample unsplittable (:class:`SplitRefused`).
- :func:`sample_part`: the part ``[start, stop)`` of an encoded sample, as an encoded sample of
  its own: tokens, labels, loss mask and per-token fields sliced; the images (pixel values or
  pending images, grids, token counts, per-image ``visual`` inputs) and videos whose tokens lie
  in the part travel with it. The first token of a *continuation* part (one that does not
  start at the sample's first token) gets the ignore index as label and loss mask 0: its
  target would be predicted from the previous token, which lies in another part (another
  sub-sequence, which this part cannot attend to).
- Part restore keys (:func:`part_key`, :func:`parse_part_key`): ``("SplitPart", start, stop,
  base_restore_key)`` with offsets into the whole sample, so that restoring re-reads the whole
  sample and cuts the same part again (as Energon's partial-sample packing proposal, PR #239,
  keeps a slice beside the base sample's key).
"""

from collections.abc import Sequence
from typing import Any

import torch

from energon_plugins.encoding.samples import EncodedSample, PendingImagesSample

__all__ = [
    "PART_KEY",
    "SplitRefused",
    "media_spans",
    "parse_part_key",
    "part_key",
    "sample_part",
    "split_points",
]

PART_KEY = "SplitPart"
"""The first entry of a part's restore key."""


class SplitRefused(ValueError):
    """A sample cannot be split into parts; ``reason`` is the count key it is skipped under."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _item_spans(
    input_ids: torch.Tensor, token_id: Any, counts: Sequence[int] | None
) -> list[tuple[int, int]]:
    """The ``(start, end)`` token span of each image (or video) whose tokens are ``token_id``.

    With the per-item token ``counts`` (summing to the number of such tokens) the tokens are
    dealt out in order, so adjacent items are told apart; otherwise each maximal run of
    ``token_id`` is one span.
    """
    if not isinstance(token_id, int):
        return []
    positions = (input_ids == token_id).nonzero().flatten().tolist()
    if not positions:
        return []
    if counts is not None and sum(counts) == len(positions) and all(n > 0 for n in counts):
        spans, first = [], 0
        for n in counts:
            spans.append((positions[first], positions[first + n - 1] + 1))
            first += n
        return spans
    spans = []
    start = previous = positions[0]
    for position in positions[1:]:
        if position != previous + 1:
            spans.append((start, previous + 1))
            start = position
        previous = position
    spans.append((start, previous + 1))
    return spans


def media_spans(
    sample: EncodedSample, image_token_id: Any, video_token_id: Any, audio_token_id: Any = None
) -> list[tuple[int, int]]:
    """The token spans of ``sample``'s images, videos and audio clips (each run of
    ``audio_token_id`` is one clip), sorted: a cut may not fall inside one."""
    spans = (
        _item_spans(sample.input_ids, image_token_id, sample.image_token_counts) if sample.num_images else []
    )
    if sample.num_videos:
        spans += _item_spans(sample.input_ids, video_token_id, sample.video_token_counts)
    spans += _item_spans(sample.input_ids, audio_token_id, None)
    return sorted(spans)


def split_points(length: int, spans: Sequence[tuple[int, int]], capacity: int) -> list[tuple[int, int]]:
    """Cut ``[0, length)`` into consecutive parts of at most ``capacity`` tokens.

    Each part takes as many tokens as fit; a cut inside a span moves back to the span's start.

    Raises:
        SplitRefused: a span (one image or video) is longer than ``capacity``
            (``split_media_too_long``).
    """
    if capacity < 1:
        raise ValueError(f"split_points: capacity must be >= 1, got {capacity}")
    parts: list[tuple[int, int]] = []
    start = 0
    while length - start > capacity:
        cut = start + capacity
        for span_start, span_end in spans:
            if span_start < cut < span_end:
                cut = span_start
                break
        if cut <= start:
            raise SplitRefused(
                "split_media_too_long",
                f"an image or video of {span_end - span_start} tokens is longer than the pack "
                f"({capacity} tokens); it cannot be split",
            )
        parts.append((start, cut))
        start = cut
    parts.append((start, length))
    return parts


def _inside(spans: list[tuple[int, int]], start: int, stop: int) -> list[int]:
    """Indices of the spans inside ``[start, stop)``."""
    return [k for k, (a, b) in enumerate(spans) if start <= a and b <= stop]


def _pixel_rows(sample: EncodedSample) -> list[int] | None:
    """Rows of ``pixel_values`` per image (grid patches, tiles, or one), None if unknown."""
    count = int(sample.num_images)
    if sample.image_grid_thw is not None and int(sample.image_grid_thw.shape[0]) == count:
        rows = [int(n) for n in sample.image_grid_thw.prod(dim=-1).tolist()]
    elif sample.visual and sample.visual.get("num_patches") is not None:
        rows = [int(n) for n in sample.visual["num_patches"].tolist()]
    else:
        rows = [1] * count
    if sample.pixel_values is not None and sum(rows) != int(sample.pixel_values.shape[0]):
        return None
    return rows


def _some_images(sample: EncodedSample, first: int, last: int) -> dict[str, Any]:
    """The image fields of ``sample`` for its images ``first..last-1`` (a proper subset)."""
    key = sample.__key__
    if sample.num_videos:
        raise SplitRefused(
            "split_media_layout",
            f"sample {key!r}: its images and videos would land in different parts",
        )
    rows = _pixel_rows(sample)
    if rows is None:
        raise SplitRefused(
            "split_media_layout",
            f"sample {key!r}: cannot tell which pixel_values rows belong to which image",
        )
    row_first, row_last = sum(rows[:first]), sum(rows[:last])
    visual: dict[str, torch.Tensor] = {}
    for name, value in (sample.visual or {}).items():
        if int(value.shape[0]) == int(sample.num_images):
            visual[name] = value[first:last]
        elif int(value.shape[0]) == sum(rows):
            visual[name] = value[row_first:row_last]
        else:
            raise SplitRefused(
                "split_media_layout",
                f"sample {key!r}: its visual input {name!r} is not laid out per image",
            )
    counts = sample.image_token_counts
    fields: dict[str, Any] = {
        "pixel_values": sample.pixel_values[row_first:row_last] if sample.pixel_values is not None else None,
        "image_grid_thw": sample.image_grid_thw[first:last] if sample.image_grid_thw is not None else None,
        "num_images": last - first,
        "image_token_counts": list(counts[first:last]) if counts is not None else None,
        "visual": visual or None,
    }
    if isinstance(sample, PendingImagesSample) and sample.pending_images:
        fields["pending_images"] = list(sample.pending_images[first:last])
    return fields


def _media_fields(
    sample: EncodedSample,
    start: int,
    stop: int,
    image_token_id: Any,
    video_token_id: Any,
    audio_token_id: Any = None,
) -> dict[str, Any]:
    """The media fields the part ``[start, stop)`` takes: all, none, or its own images."""
    all_spans = media_spans(sample, image_token_id, video_token_id, audio_token_id)
    if not all_spans and (sample.num_images or sample.num_videos):
        raise SplitRefused(
            "split_media_layout",
            f"sample {sample.__key__!r} has images or videos but no known image/video tokens",
        )
    if not all_spans or all(start <= a and b <= stop for a, b in all_spans):
        media = {
            "pixel_values": sample.pixel_values,
            "image_grid_thw": sample.image_grid_thw,
            "num_images": sample.num_images,
            "image_token_counts": sample.image_token_counts,
            "visual": sample.visual,
            "num_videos": sample.num_videos,
            "video_token_counts": sample.video_token_counts,
        }
        if isinstance(sample, PendingImagesSample):
            media["pending_images"] = sample.pending_images
        return media
    none: dict[str, Any] = {
        "pixel_values": None,
        "image_grid_thw": None,
        "num_images": 0,
        "image_token_counts": [] if sample.image_token_counts is not None else None,
        "visual": None,
        "num_videos": 0,
        "video_token_counts": [] if sample.video_token_counts is not None else None,
    }
    if not _inside(all_spans, start, stop):
        return none
    if _item_spans(sample.input_ids, audio_token_id, None):
        raise SplitRefused(
            "split_media_layout",
            f"sample {sample.__key__!r}: its audio clips and other media would land in different "
            "parts (audio features are not divided among parts)",
        )
    spans = _item_spans(sample.input_ids, image_token_id, sample.image_token_counts)
    inside = _inside(spans, start, stop)
    if len(spans) != int(sample.num_images) or not inside:
        raise SplitRefused(
            "split_media_layout",
            f"sample {sample.__key__!r}: cannot tell which images lie in a part "
            f"({len(spans)} image token spans for {sample.num_images} images)",
        )
    return {**none, **_some_images(sample, inside[0], inside[-1] + 1)}


def sample_part(
    sample: EncodedSample,
    start: int,
    stop: int,
    *,
    image_token_id: Any,
    video_token_id: Any,
    ignore_index: int,
    base_offset: int = 0,
    base_key: str | None = None,
    audio_token_id: Any = None,
) -> EncodedSample:
    """The tokens ``[start, stop)`` of ``sample`` as an encoded sample of their own.

    ``sample`` may itself be a part that starts at token ``base_offset`` of a sample whose
    ``__key__`` is ``base_key``; the part's ``__key__`` is ``"{base_key}[{a}:{b}]"`` with ``a``,
    ``b`` its offsets into the whole sample, so cutting a part of a part gives what cutting the
    whole sample there gives. A part that does not start at the whole sample's first token has
    no target on its first token (label ``ignore_index``, loss mask 0).

    Raises:
        SplitRefused: the part would cut through an image or video, or its images cannot be
            told apart (``split_media_layout``).
    """
    if not 0 <= start < stop <= sample.length:
        raise ValueError(f"sample_part: part [{start}, {stop}) outside a sample of {sample.length} tokens")
    for a, b in media_spans(sample, image_token_id, video_token_id, audio_token_id):
        if a < start < b or a < stop < b:
            raise SplitRefused(
                "split_media_layout",
                f"sample {sample.__key__!r}: a part [{start}, {stop}) cuts an image, video or audio clip",
            )
    media = _media_fields(sample, start, stop, image_token_id, video_token_id, audio_token_id)
    labels = sample.labels[start:stop]
    loss_mask = sample.loss_mask[start:stop]
    if base_offset + start > 0:  # a continuation: its first target lies in the previous part
        labels, loss_mask = labels.clone(), loss_mask.clone()
        labels[0] = ignore_index
        loss_mask[0] = 0
    token_fields = (
        {name: value[start:stop] for name, value in sample.token_fields.items()}
        if sample.token_fields
        else None
    )
    cls = PendingImagesSample if media.get("pending_images") else EncodedSample
    if cls is EncodedSample:
        media.pop("pending_images", None)
    whole_key = base_key if base_key is not None else str(sample.__key__)
    return cls.derive_from(
        sample,
        __key__=f"{whole_key}[{base_offset + start}:{base_offset + stop}]",
        input_ids=sample.input_ids[start:stop],
        labels=labels,
        loss_mask=loss_mask,
        seq_lengths=[stop - start],
        truncated=sample.truncated,
        token_fields=token_fields,
        **media,
    )


def part_key(restore_key: Any, start: int, stop: int) -> tuple[Any, ...]:
    """The restore key of the part ``[start, stop)`` of the sample (or part) ``restore_key``."""
    parsed = parse_part_key(restore_key)
    if parsed is None:
        return (PART_KEY, start, stop, restore_key)
    offset, _, base = parsed
    return (PART_KEY, offset + start, offset + stop, base)


def parse_part_key(restore_key: Any) -> tuple[int, int, Any] | None:
    """``(start, stop, base_restore_key)`` of a part's restore key; None for a whole sample."""
    if isinstance(restore_key, tuple) and len(restore_key) == 4 and restore_key[0] == PART_KEY:
        return int(restore_key[1]), int(restore_key[2]), restore_key[3]
    return None
