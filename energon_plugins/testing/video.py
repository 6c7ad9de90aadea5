"""Small real video files for tests, demos and benchmarks, written with PyAV.

:func:`video_frames` draws frames whose content changes from frame to frame (a moving bar
and a per-frame brightness, so a wrong frame shows), :func:`encode_video` encodes them into a
real container (H.264 in MP4 by default, or VP9 in WebM, MPEG-4 in AVI), and
:func:`decode_every_frame` decodes all frames of a file with plain PyAV: the oracle against
which seek-based decoding of chosen frames is checked.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

CODECS = {"mp4": "libx264", "webm": "libvpx-vp9", "avi": "mpeg4", "mkv": "libx264", "mov": "libx264"}
"""The codec written for each container format."""

_FORMATS = {"mkv": "matroska"}


def video_frames(num_frames: int, size: tuple[int, int] = (32, 32), seed: int = 0) -> np.ndarray:
    """``(T, H, W, 3)`` uint8 frames of ``size`` (width, height): a moving bar on a gradient.

    Frame ``i`` has brightness ``i``-dependent and its bar at an ``i``-dependent column, so
    consecutive frames differ visibly even after lossy compression.
    """
    width, height = size
    frames = np.empty((num_frames, height, width, 3), dtype=np.uint8)
    for i, frame in enumerate(iter_video_frames(num_frames, size, seed)):
        frames[i] = frame
    return frames


def iter_video_frames(
    num_frames: int, size: tuple[int, int] = (32, 32), seed: int = 0, texture: bool = False
) -> Iterator[np.ndarray]:
    """The frames of :func:`video_frames` one at a time (long videos never sit in memory).

    ``texture``: pan a fixed random texture under the bar (camera motion over detail: a
    bit rate and decode cost closer to filmed video than a smooth gradient's).
    """
    width, height = size
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 64, 3)
    ys, xs = np.mgrid[0:height, 0:width]
    detail = None
    if texture:  # coarse noise, enlarged 8x: shapes and edges rather than grain
        coarse = rng.integers(0, 64, (height // 4 + 1, width // 4 + 1, 3), dtype=np.uint8)
        detail = coarse.repeat(8, axis=0).repeat(8, axis=1)[: height * 2, : width * 2]
    for i in range(num_frames):
        level = (i * 37) % 160
        frame = np.stack(
            [
                (base[0] + level + xs * 96 // max(width, 1)) % 256,
                (base[1] + ys * 96 // max(height, 1)) % 256,
                (base[2] + 160 - level) % 256 + 0 * xs,
            ],
            axis=-1,
        ).astype(np.uint8)
        if detail is not None:
            dy, dx = (i * 3) % height, (i * 5) % width
            frame = frame + detail[dy : dy + height, dx : dx + width]
        bar = (i * max(1, width // 8)) % width
        frame[:, bar : bar + max(1, width // 8)] = 255
        yield frame


def encode_video(
    frames: Iterable[np.ndarray],
    fps: int = 8,
    *,
    container: str = "mp4",
    gop: int | None = None,
    options: dict[str, str] | None = None,
) -> bytes:
    """Encode ``(H, W, 3)`` uint8 RGB frames into a video file of ``container`` format.

    ``gop``: frames between keyframes (the encoder's default when ``None``). ``options``: codec
    options (the H.264 default is near-lossless ``crf 12`` without B-frames).
    """
    import av

    codec = CODECS[container]
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=_FORMATS.get(container, container)) as out:
        stream: av.VideoStream | None = None
        for frame in frames:
            if stream is None:
                added = out.add_stream(codec, rate=fps)
                assert isinstance(added, av.VideoStream), f"{codec} is a video codec"
                stream = added
                stream.height, stream.width = int(frame.shape[0]), int(frame.shape[1])
                stream.pix_fmt = "yuv420p"
                if gop is not None:
                    stream.codec_context.gop_size = gop
                defaults = {"crf": "12", "bf": "0"} if codec == "libx264" else {}
                stream.options = {**defaults, **(options or {})}
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        if stream is None:
            raise ValueError("encode_video needs at least one frame")
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


def decode_every_frame(data: bytes) -> list[np.ndarray]:
    """Every frame of a video file as ``(H, W, 3)`` uint8 RGB, decoded in order by plain PyAV."""
    import av

    with av.open(io.BytesIO(data), "r") as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def video_size(data: bytes) -> dict[str, Any]:
    """``{"frames", "fps", "width", "height"}`` of a video file, from its stream header."""
    import av

    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.video[0]
        if stream.average_rate is None:
            raise ValueError("video_size: the video stream declares no frame rate")
        return {
            "frames": int(stream.frames),
            "fps": float(stream.average_rate),
            "width": int(stream.width),
            "height": int(stream.height),
        }


def write_vidqa_dataset(
    path: Any,
    samples: list[tuple[str, bytes, str, str]],
    *,
    extension: str = "mp4",
    samples_per_shard: int = 4,
    split_ratio: tuple[tuple[str, float], ...] = (("train", 1.0),),
) -> list[Any]:
    """Write ``(key, video file, question, answer)`` samples as a prepared ``VidQASample`` dataset.

    Each sample holds the video as ``KEY.mp4`` (``extension``) and ``KEY.json`` with
    ``question`` and ``answers``; ``.nv-meta/dataset.yaml`` maps them with a field map. Indexed
    with Energon's own prepare API. Returns the shard paths.
    """
    import json
    import pathlib

    from energon_plugins.testing.crude import write_prepared_shards

    root = pathlib.Path(path)
    records = [
        {
            "__key__": key,
            extension: video,
            "json": json.dumps({"question": question, "answers": [answer]}).encode(),
        }
        for key, video, question, answer in samples
    ]
    shards = write_prepared_shards(
        root, records, samples_per_shard=samples_per_shard, split_ratio=split_ratio
    )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: VidQASample\n"
        f"field_map:\n  video: {extension}\n  context: json[question]\n  answers: json[answers]\n"
    )
    return shards
