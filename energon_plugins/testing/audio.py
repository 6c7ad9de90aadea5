"""Small real audio files for tests and demos, written with PyAV.

:func:`encode_tone` writes a mono sine tone as a real file (WAV, FLAC, MP3, Ogg/Opus or
M4A/AAC), and :func:`decode_every_sample` decodes a whole file with plain PyAV, resampled by
libswresample to one rate: the oracle against which windowed decoding is checked.
"""

from __future__ import annotations

import io

import numpy as np

AUDIO_CODECS = {
    "wav": ("wav", "pcm_s16le", "s16"),
    "flac": ("flac", "flac", "s16"),
    "mp3": ("mp3", "libmp3lame", "fltp"),
    "ogg": ("ogg", "libopus", "flt"),
    "m4a": ("ipod", "aac", "fltp"),
}
"""Per file extension: the PyAV container format, the codec and the sample format written."""


def encode_tone(ext: str, seconds: float, rate: int, freq: float = 440.0) -> bytes:
    """A mono sine tone of ``seconds`` at ``rate`` samples per second, amplitude 0.5,
    encoded as an ``ext`` file (a key of :data:`AUDIO_CODECS`).

    Raises:
        KeyError: an extension not in :data:`AUDIO_CODECS`.
    """
    import av

    container, codec, sample_format = AUDIO_CODECS[ext]
    buffer = io.BytesIO()
    wave = (0.5 * np.sin(2 * np.pi * freq * np.arange(int(rate * seconds)) / rate)).astype(np.float32)
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        assert isinstance(stream, av.AudioStream), f"{codec} is an audio codec"
        for start in range(0, len(wave), 1024):
            chunk: np.ndarray = wave[None, start : start + 1024]
            if sample_format == "s16":
                chunk = (chunk * 32767).astype(np.int16)
            frame = av.AudioFrame.from_ndarray(chunk, format=sample_format, layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def decode_every_sample(data: bytes, rate: int = 16000) -> np.ndarray:
    """Every frame of an audio file decoded by plain PyAV, resampled to ``rate`` mono
    float32 (one libswresample pass over the stream)."""
    import av

    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
    parts = []
    with av.open(io.BytesIO(data), "r") as container:
        for frame in container.decode(audio=0):
            parts += [f.to_ndarray().reshape(-1) for f in resampler.resample(frame)]
    parts += [f.to_ndarray().reshape(-1) for f in resampler.resample(None)]
    return np.concatenate(parts).astype(np.float32)
