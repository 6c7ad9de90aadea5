"""The audio clips of each row of a batch, drawn: a waveform strip (HTML) and a sparkline
(terminal), next to the clip's audio-token span.

A batch carries no waveforms (the model gets the processor's features), so ``preview`` asks
the task encoder for the clips it fed its processor. An encoder that takes audio offers two
methods: ``keep_preview_audio()``, which ``preview`` calls before it reads (from then on the
encoder keeps each sample's decoded, resampled and clipped waveforms, in this process), and
``preview_audios(batch)``, which returns per row each clip as an object with ``waveform``
(``(N,)`` float samples in [-1, 1]) and ``sampling_rate``, in the order of the row's audio
tokens. An encoder without them shows no clips. The audio placeholder's id is the encoder's
``audio_token_id`` (as ``video_token_id`` for videos); each run of it in a row is one clip's
token span.
"""

from __future__ import annotations

import base64
import dataclasses
import io
from typing import Any

WAVEFORM_WIDTH = 320
"""Width of the HTML waveform strip, in pixels (one min/max pair of samples per column)."""

WAVEFORM_HEIGHT = 48
"""Height of the HTML waveform strip, in pixels (full scale, -1 to 1)."""

SPARKLINE_WIDTH = 32
"""Characters of the terminal sparkline of one clip."""

_BLOCKS = "▁▂▃▄▅▆▇█"
_WAVE_COLOUR = (200, 120, 20)


@dataclasses.dataclass(frozen=True)
class AudioView:
    """What ``preview`` shows of one audio clip of a row.

    Attributes:
        seconds: the clip's length as fed to the processor.
        sampling_rate: its samples per second.
        png: the waveform strip as a base64 PNG (:func:`waveform_png_base64`).
        sparkline: the terminal sparkline (:func:`sparkline`).
        tokens: its audio tokens in the row's ids, or ``None`` where unknown.
        span: ``(first, last + 1)`` positions of those tokens in the row, or ``None``.
    """

    seconds: float
    sampling_rate: int
    png: str
    sparkline: str
    tokens: int | None
    span: tuple[int, int] | None


def encoder_audio_token_id(datamodule: Any) -> int | None:
    """The audio placeholder's id as the training encoder expands it (``audio_token_id``), or
    ``None`` for an encoder without audio."""
    value = getattr(datamodule.task_encoder, "audio_token_id", None)
    return value if isinstance(value, int) else None


def keep_preview_audio(encoder: Any) -> bool:
    """Ask ``encoder`` to keep the clips it feeds its processor (its ``keep_preview_audio()``);
    whether it can (an encoder without audio cannot)."""
    keep = getattr(encoder, "keep_preview_audio", None)
    if not callable(keep):
        return False
    keep()
    return True


def row_audio_clips(encoder: Any, batch: Any) -> list[list[Any]]:
    """Per row of ``batch``, the clips the encoder fed its processor (its
    ``preview_audios(batch)``); no clips for an encoder without it."""
    rows = int(batch.input_ids.shape[0])
    draw = getattr(encoder, "preview_audios", None)
    clips = draw(batch) if callable(draw) else []
    return [list(clips[row]) if row < len(clips) else [] for row in range(rows)]


def audio_token_runs(ids: list[int], audio_id: int | None) -> list[tuple[int, int]]:
    """``(first, last + 1)`` of each run of ``audio_id`` in ``ids``: one clip's tokens each
    (processors put a begin and an end marker around every clip)."""
    if audio_id is None:
        return []
    runs: list[tuple[int, int]] = []
    for position, token in enumerate(ids):
        if token != audio_id:
            continue
        if runs and runs[-1][1] == position:
            runs[-1] = (runs[-1][0], position + 1)
        else:
            runs.append((position, position + 1))
    return runs


def _column_bounds(waveform: Any, columns: int) -> tuple[Any, Any]:
    """Per column, the lowest and highest sample of its share of ``waveform`` (zeros where a
    column gets no samples: a clip shorter than ``columns``)."""
    import numpy as np

    samples = np.asarray(waveform, dtype=np.float32).reshape(-1)
    low = np.zeros(columns, dtype=np.float32)
    high = np.zeros(columns, dtype=np.float32)
    if samples.size == 0:
        return low, high
    edges = np.linspace(0, samples.size, columns + 1).astype(np.int64)
    filled = edges[1:] > edges[:-1]
    starts = edges[:-1][filled]
    low[filled] = np.minimum.reduceat(samples, starts)
    high[filled] = np.maximum.reduceat(samples, starts)
    return np.clip(low, -1.0, 1.0), np.clip(high, -1.0, 1.0)


def waveform_png_base64(waveform: Any, width: int = WAVEFORM_WIDTH, height: int = WAVEFORM_HEIGHT) -> str:
    """The waveform as a ``width`` x ``height`` base64 PNG: per pixel column, a bar from the
    lowest to the highest sample it covers (full scale: -1 at the bottom, 1 at the top), on
    white, with a grey zero line."""
    import numpy as np
    from PIL import Image

    low, high = _column_bounds(waveform, width)
    scale = (height - 1) / 2.0
    top = np.rint((1.0 - high) * scale).astype(np.int64)  # row 0 is full scale
    bottom = np.rint((1.0 - low) * scale).astype(np.int64)
    pixels = np.full((height, width, 3), 255, dtype=np.uint8)
    pixels[height // 2, :] = 210
    rows = np.arange(height)[:, None]
    pixels[(rows >= top[None, :]) & (rows <= bottom[None, :])] = _WAVE_COLOUR
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def sparkline(waveform: Any, width: int = SPARKLINE_WIDTH) -> str:
    """The waveform's loudness in ``width`` block characters (``▁`` to ``█``): per column its
    peak amplitude, relative to the clip's loudest column."""
    import numpy as np

    low, high = _column_bounds(waveform, width)
    peaks = np.maximum(np.abs(low), np.abs(high))
    loudest = float(peaks.max()) if peaks.size else 0.0
    if loudest <= 0.0:
        return _BLOCKS[0] * width
    levels = np.rint(peaks / loudest * (len(_BLOCKS) - 1)).astype(np.int64)
    return "".join(_BLOCKS[level] for level in levels)


def audio_views(clips: list[Any], runs: list[tuple[int, int]]) -> list[AudioView]:
    """One :class:`AudioView` per clip of a row, each with the token run of the same place
    (``runs``, in order; a clip without one has no span)."""
    views = []
    for index, clip in enumerate(clips):
        rate = int(clip.sampling_rate)
        samples = int(len(clip.waveform))
        span = runs[index] if index < len(runs) else None
        views.append(
            AudioView(
                seconds=samples / rate if rate else 0.0,
                sampling_rate=rate,
                png=waveform_png_base64(clip.waveform),
                sparkline=sparkline(clip.waveform),
                tokens=span[1] - span[0] if span else None,
                span=span,
            )
        )
    return views


def describe_audio(index: int, view: AudioView) -> str:
    """``audio 1: 1.50 s at 16000 Hz, 38 tokens at [12:50]`` (what preview knows of one clip)."""
    text = f"audio {index + 1}: {view.seconds:.2f} s at {view.sampling_rate} Hz"
    if view.tokens is not None:
        text += f", {view.tokens} tokens"
    if view.span is not None:
        text += f" at [{view.span[0]}:{view.span[1]}]"
    return text
