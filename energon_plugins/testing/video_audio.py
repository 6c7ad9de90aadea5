"""Small real video files with a sound track, for tests and demos, written with PyAV.

:func:`encode_video_with_tone` muxes the moving-bar frames of :mod:`.video` and a sine tone
(as :func:`.audio.encode_tone` draws it) into one container: H.264 with AAC in MP4, MOV and
Matroska, VP9 with Opus in WebM. :func:`.audio.decode_every_sample` decodes its audio track
(PyAV's first audio stream), the oracle for an audio part held in a video container.
"""

from __future__ import annotations

import io

import numpy as np

VIDEO_AUDIO_CODECS = {
    "mp4": ("mp4", "libx264", "aac"),
    "mov": ("mov", "libx264", "aac"),
    "mkv": ("matroska", "libx264", "aac"),
    "webm": ("webm", "libvpx-vp9", "libopus"),
}
"""Per file extension: the PyAV container format, the video codec and the audio codec."""


def encode_video_with_tone(
    ext: str,
    seconds: float,
    rate: int,
    freq: float = 440.0,
    *,
    fps: int = 8,
    size: tuple[int, int] = (32, 32),
) -> bytes:
    """A video of ``seconds`` (``fps`` frames a second of ``size``) whose audio track is a mono
    sine tone at ``rate`` samples per second, amplitude 0.5, as an ``ext`` file (a key of
    :data:`VIDEO_AUDIO_CODECS`; Opus takes 8, 12, 16, 24 or 48 kHz).

    Raises:
        KeyError: an extension not in :data:`VIDEO_AUDIO_CODECS`.
    """
    import av

    from energon_plugins.testing.video import iter_video_frames

    container, video_codec, audio_codec = VIDEO_AUDIO_CODECS[ext]
    wave = (0.5 * np.sin(2 * np.pi * freq * np.arange(int(rate * seconds)) / rate)).astype(np.float32)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        video = out.add_stream(video_codec, rate=fps)
        audio = out.add_stream(audio_codec, rate=rate, layout="mono")
        assert isinstance(video, av.VideoStream) and isinstance(audio, av.AudioStream)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        formats = [f.name for f in audio.codec_context.codec.audio_formats or ()]
        sample_format = "fltp" if "fltp" in formats else "flt"  # AAC: planar, Opus: packed
        step = audio.codec_context.frame_size or 1024
        for frame in iter_video_frames(max(1, round(seconds * fps)), size):
            for packet in video.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for start in range(0, len(wave), step):
            chunk = av.AudioFrame.from_ndarray(
                wave[None, start : start + step], format=sample_format, layout="mono"
            )
            chunk.sample_rate = rate
            for packet in audio.encode(chunk):
                out.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode(None):
                out.mux(packet)
    return buffer.getvalue()
