"""Decoding the kept frames of a video with Energon's AV decoder (PyAV underneath).

Energon hands a video part of a sample (``mp4``, ``webm``, ``mkv``, ``mov``, ``avi``...) to a
task encoder as a lazy :class:`megatron.energon.av.AVDecoder` (``SampleDecoder(av_decode=
"AVDecoder")``, Energon's default). :func:`read_video_info` reads its metadata (frame count,
rate, size: the container index and one frame), and :func:`decode_frames` decodes only the
frames asked for, in one pass over the container: Energon's reader seeks to the keyframe
before each wanted frame when one lies ahead and decodes forward from there, so frames
between the kept ones are skipped, not decoded and converted. A file that cannot be read or
ends early raises :class:`VideoDecodeError` (a counted skip, reason ``video``) naming the part.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import torch

from energon_plugins.encoding.skips import CountedSkip
from energon_plugins.encoding.video.sampling import VideoInfo

REASON = "video"
"""The skip reason of a video that cannot be decoded."""


class VideoDecodeError(CountedSkip):
    """A video part cannot be decoded (corrupt, truncated, no video stream).

    A :class:`~energon_plugins.encoding.skips.CountedSkip` with reason ``video``:
    skipped and counted under ``on_error: skip``, an error naming the sample and the part under
    ``on_error: raise``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(REASON, message)


@dataclasses.dataclass(frozen=True)
class SampledVideo:
    """The kept frames of one video and where they lie in it.

    Attributes:
        frames: ``(T, 3, H, W)`` uint8 RGB frames, in order.
        indices: the frame number of each kept frame in the video.
        timestamps: the presentation time of each kept frame, in seconds (as decoded).
        info: the video's :class:`~energon_plugins.encoding.video.sampling.VideoInfo`.
    """

    frames: torch.Tensor
    indices: list[int]
    timestamps: list[float]
    info: VideoInfo

    def metadata(self) -> dict[str, Any]:
        """transformers' ``VideoMetadata`` fields of the kept frames (``video_metadata=``)."""
        return {
            "total_num_frames": self.info.num_frames,
            "fps": self.info.fps,
            "width": self.info.width,
            "height": self.info.height,
            "duration": self.info.duration,
            "video_backend": "pyav",
            "frames_indices": list(self.indices),
        }


def as_av_decoder(value: Any, name: str = "part") -> Any:
    """Energon's ``AVDecoder`` for a video part: as decoded, or built from raw bytes.

    Raises:
        VideoDecodeError: ``value`` is neither an ``AVDecoder`` nor bytes.
    """
    from megatron.energon.av import AVDecoder

    if isinstance(value, AVDecoder):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return AVDecoder(io.BytesIO(bytes(value)))
    raise VideoDecodeError(
        f"video {name} is a {type(value).__name__}, not a video (Energon decodes video "
        "parts to an AVDecoder with SampleDecoder(av_decode='AVDecoder'), its default)"
    )


def read_video_info(decoder: Any, name: str = "part") -> VideoInfo:
    """The :class:`VideoInfo` of a video, from its container (one frame decoded, for the size).

    Raises:
        VideoDecodeError: the container cannot be read or has no usable video stream.
    """
    try:
        meta = decoder.get_metadata(get_audio=False)
    except Exception as exc:
        raise VideoDecodeError(f"video {name} cannot be read: {_describe(exc)}") from exc
    missing = [
        field
        for field, value in (
            ("frame count", meta.video_num_frames),
            ("frame rate", meta.video_fps),
            ("frame size", meta.video_width),
            ("duration", meta.video_duration),
        )
        if not value
    ]
    if missing:
        raise VideoDecodeError(f"video {name} has no video stream with a {', '.join(missing)}")
    return VideoInfo(
        num_frames=int(meta.video_num_frames),
        fps=float(meta.video_fps),
        width=int(meta.video_width),
        height=int(meta.video_height),
        duration=float(meta.video_duration),
    )


def decode_frames(decoder: Any, info: VideoInfo, indices: list[int], name: str = "part") -> SampledVideo:
    """Decode only the frames ``indices`` of a video (seeking), as a :class:`SampledVideo`.

    Each frame is asked for by the time at its middle, one single-frame clip per index,
    through ``AVDecoder.get_video_clips`` (one container open for all of them).

    Raises:
        VideoDecodeError: the file cannot be decoded, or yields fewer frames than its index
            lists (a truncated file).
    """
    if not indices:
        raise ValueError("decode_frames needs at least one frame index")
    times = [(i + 0.5) / info.fps for i in indices]
    decoder.suppress_warnings = True  # seconds on a frame-indexed container: exact at mid-frame
    try:
        clips, spans = decoder.get_video_clips([(t, t) for t in times], video_unit="seconds")
    except Exception as exc:
        raise VideoDecodeError(f"video {name} cannot be decoded: {_describe(exc)}") from exc
    if len(clips) != len(indices) or any(int(c.shape[0]) < 1 for c in clips):
        raise VideoDecodeError(
            f"video {name} is truncated: {len(clips)} of the {len(indices)} frames asked "
            f"for could be decoded (its index lists {info.num_frames} frames)"
        )
    frames = torch.cat([clip[:1] for clip in clips], dim=0)
    return SampledVideo(
        frames=frames, indices=list(indices), timestamps=[float(start) for start, _ in spans], info=info
    )


def labelled_videos(sample: Any) -> list[tuple[Any, str]]:
    """A conversation sample's videos, each with the file it came from (:func:`describe_part`
    of its part name; ``N.video`` where the sample does not name its parts)."""
    parts = list(sample.video_parts) or [f"{i}.video" for i in range(len(sample.videos))]
    return [(video, describe_part(sample, part)) for video, part in zip(sample.videos, parts)]


def describe_part(sample: Any, part: str) -> str:
    """``'KEY.PART' in shard 'SHARD'``: the file of a sample's video part, for error messages."""
    key = getattr(sample, "__key__", None)
    if key is None and isinstance(sample, dict):
        key = sample.get("__key__")
    sources = getattr(sample, "__sources__", None)
    if sources is None and isinstance(sample, dict):
        sources = sample.get("__sources__")
    text = f"{key}.{part}" if key is not None else part
    for source in sources or ():
        names = getattr(source, "file_names", ()) or ()
        if any(str(n).endswith(f".{part}") or str(n) == part for n in names):
            return f"{text!r} in shard {getattr(source, 'shard_name', '?')!r}"
    return repr(text)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
