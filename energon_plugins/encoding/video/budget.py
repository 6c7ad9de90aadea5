"""The visual-token budget: fewer frames first, then a lower resolution, then a skip.

:func:`budget_plans` lists, from the sampled plan down, the plans an encoder tries for one
sample until one fits its budget (``max_visual_tokens``, ``seq_length``): every video gives
up a quarter of its frames at a time (rounded down to the frame multiple) until each is at
its floor (``min_frames``), then ``max_pixels`` is lowered by a quarter at a time down to
``budget_min_pixels``. An encoder that can count a plan's tokens without decoding (Qwen's
video processors know the grid from the frame size) tries plans for free and decodes only
the one that fits; others encode each plan they try.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from energon_plugins.encoding.video.options import VideoOptions
from energon_plugins.encoding.video.sampling import VideoInfo, frame_count, round_frames

BUDGET_REASON = "video_budget"
"""The skip reason of a sample that no plan fits."""

STEP = 0.75
"""What a step keeps: three quarters of the frames, or of the pixels."""


@dataclasses.dataclass(frozen=True)
class VideoPlan:
    """Frames kept of each video of a sample, and the per-frame pixel cap.

    Attributes:
        frames: the frame count of each video, in order.
        max_pixels: the per-frame pixel cap (``None``: the configured one).
    """

    frames: tuple[int, ...]
    max_pixels: int | None = None


def sampled_plan(infos: Sequence[VideoInfo], options: VideoOptions, multiple: int = 1) -> VideoPlan:
    """The plan the options ask for before any budget (each video's :func:`frame_count`)."""
    return VideoPlan(tuple(frame_count(info, options, multiple) for info in infos), options.max_pixels)


def budget_plans(
    infos: Sequence[VideoInfo],
    options: VideoOptions,
    multiple: int = 1,
    *,
    max_pixels: int | None = None,
) -> Iterator[VideoPlan]:
    """The plans to try for one sample, from the sampled one down (see the module doc).

    ``max_pixels`` is the per-frame cap in force (``options.max_pixels``, else the processor's);
    without it, or without ``options.budget_min_pixels``, the resolution is never lowered.
    """
    first = sampled_plan(infos, options, multiple)
    frames = list(first.frames)
    floors = [
        min(f, round_frames(options.min_frames, info.num_frames, multiple)) for f, info in zip(frames, infos)
    ]
    pixels = max_pixels if max_pixels is not None else first.max_pixels
    yield VideoPlan(tuple(frames), pixels)
    while any(f > floor for f, floor in zip(frames, floors)):
        frames = [_fewer(f, floor, multiple) for f, floor in zip(frames, floors)]
        yield VideoPlan(tuple(frames), pixels)
    floor_pixels = options.budget_min_pixels
    if pixels is None or floor_pixels is None:
        return
    while pixels > floor_pixels:
        pixels = max(floor_pixels, int(pixels * STEP))
        yield VideoPlan(tuple(frames), pixels)


def _fewer(frames: int, floor: int, multiple: int) -> int:
    """A quarter fewer frames (rounded down to ``multiple``), at least one step, not below ``floor``."""
    if frames <= floor:
        return frames
    fewer = int(frames * STEP) // multiple * multiple
    if fewer >= frames:
        fewer = frames - multiple
    return max(floor, fewer)


def budget_misfit(
    visual_tokens: int, length: int | None, max_visual_tokens: int | None, seq_length: int
) -> str:
    """Why a plan does not fit: its visual tokens over ``max_visual_tokens``, or its length
    (``None``: not known yet) over ``seq_length``; empty when it fits."""
    if max_visual_tokens is not None and visual_tokens > max_visual_tokens:
        return f"visual tokens {visual_tokens} > video.max_visual_tokens {max_visual_tokens}"
    if length is not None and length > seq_length:
        return f"{length} tokens > seq_length {seq_length}"
    return ""


def budget_skip(key: Any, why: str) -> Any:
    """The counted skip of a sample no plan fits: ``video_budget`` (visual tokens) or
    ``too_long`` (``seq_length``), with why (:func:`budget_misfit` of the last plan tried)."""
    from energon_plugins.encoding.skips import CountedSkip

    reason = BUDGET_REASON if why.startswith("visual") else "too_long"
    return CountedSkip(
        reason, f"sample {key!r}: {why}, with the fewest frames and pixels the video options allow"
    )
