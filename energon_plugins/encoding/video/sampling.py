"""Which frames of a video are kept: pure functions of the video's metadata and the options.

:func:`frame_count` says how many frames (``num_frames`` or ``fps``, held between
``min_frames`` and ``max_frames``, rounded down to ``frame_multiple``), :func:`frame_indices`
which ones: frame ``i`` of ``n`` is the one at the middle of the ``i``-th of ``n`` equal
shares of the video, so the kept frames are spread evenly and never bunch at either end.
Nothing here decodes: the indices are known from the metadata, before a frame is read.
"""

from __future__ import annotations

import dataclasses

from energon_plugins.encoding.video.options import VideoOptions


@dataclasses.dataclass(frozen=True)
class VideoInfo:
    """What a video's container says about it (read without decoding its frames).

    Attributes:
        num_frames: frames in the video stream.
        fps: its average frame rate.
        width, height: the frame size in pixels.
        duration: seconds of video.
    """

    num_frames: int
    fps: float
    width: int
    height: int
    duration: float


def frame_count(info: VideoInfo, options: VideoOptions, multiple: int = 1) -> int:
    """How many frames of the video ``options`` keep.

    ``num_frames``, or ``fps`` times the duration (rounded), held between ``min_frames`` and
    ``max_frames``, rounded down to a multiple of ``multiple`` (never below one multiple), and
    never more than the video has.
    """
    if options.num_frames is not None:
        wanted = options.num_frames
    else:
        wanted = round(info.duration * float(options.rate or 0.0))
    wanted = max(options.min_frames, min(options.max_frames, wanted))
    return round_frames(wanted, info.num_frames, multiple)


def round_frames(count: int, available: int, multiple: int = 1) -> int:
    """``count`` rounded down to ``multiple`` (at least one multiple), at most ``available``."""
    multiple = max(1, int(multiple))
    count = max(multiple, count // multiple * multiple)
    return max(1, min(count, available))


def frame_indices(total: int, count: int) -> list[int]:
    """``count`` frame indices of a ``total``-frame video: the middle frame of each equal share.

    Raises:
        ValueError: ``count`` is not between 1 and ``total``.
    """
    if not 1 <= count <= total:
        raise ValueError(f"cannot keep {count} frames of a video with {total}")
    return [min(total - 1, int((2 * i + 1) * total // (2 * count))) for i in range(count)]
