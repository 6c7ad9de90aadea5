"""``preview``'s audio views: the waveform strip, the sparkline, the audio-token runs and the
collapsed audio span (the whole path, on a real processor and dataset, is in the
hf-processor plugin's ``tests/test_preview_audio.py``)."""

import base64
import io
import types

import numpy as np
import pytest
from PIL import Image

from energon_plugins.preview.audio import (
    AudioView,
    audio_token_runs,
    audio_views,
    describe_audio,
    keep_preview_audio,
    row_audio_clips,
    sparkline,
    waveform_png_base64,
)
from energon_plugins.preview.batch_view import render_spans

AUDIO = 7


def drawn_heights(png: str) -> np.ndarray:
    """Per column of the strip, how many pixels are neither white nor the grey zero line."""
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB")).astype(int)
    return ((pixels != 255).any(axis=2) & (pixels != 210).any(axis=2)).sum(axis=0)


def test_each_run_of_the_audio_token_is_one_clip():
    ids = [1, AUDIO, AUDIO, 2, 3, AUDIO, 4, AUDIO, AUDIO, AUDIO]
    assert audio_token_runs(ids, AUDIO) == [(1, 3), (5, 6), (7, 10)]
    assert audio_token_runs(ids, None) == [] and audio_token_runs([1, 2], AUDIO) == []


def test_the_strip_is_a_min_max_envelope_per_column():
    rate = 8000
    loud = 0.8 * np.sin(2 * np.pi * 200 * np.arange(rate) / rate)
    wave = np.concatenate([np.zeros(rate), loud]).astype(np.float32)
    png = waveform_png_base64(wave, width=100, height=41)
    assert Image.open(io.BytesIO(base64.b64decode(png))).size == (100, 41)
    heights = drawn_heights(png)
    assert heights[:49].max() <= 1  # silence: the zero line's row only
    assert np.all(np.abs(heights[51:] - (0.8 * 40 + 1)) <= 1)  # -0.8..0.8 of 40 pixel rows


def test_a_clip_shorter_than_the_strip_and_one_past_full_scale_still_draw():
    samples = np.array([1.0, -1.0, 0.5], np.float32)
    # 2 columns: [1.0] a dot at the top; [-1.0, 0.5] from row 2 (0.5) to the bottom row 8 (-1)
    assert drawn_heights(waveform_png_base64(samples, width=2, height=9)).tolist() == [1, 7]
    assert drawn_heights(waveform_png_base64(samples, width=12, height=9)).max() == 1  # one each
    clipped = drawn_heights(waveform_png_base64(np.full(400, 3.0, np.float32), width=10, height=9))
    assert clipped.max() <= 5  # 3.0 drawn as 1.0: from the top to the zero line
    assert drawn_heights(waveform_png_base64(np.zeros(0, np.float32), width=10, height=9)).max() <= 1


def test_the_sparkline_follows_the_loudness_relative_to_the_loudest_column():
    ramp = np.repeat(np.linspace(0.0, 0.4, 8), 100) * np.tile([1.0, -1.0], 400)
    assert sparkline(ramp, width=8) == "▁▂▃▄▅▆▇█"
    assert sparkline(np.zeros(50), width=5) == "▁▁▁▁▁"
    assert len(sparkline(np.ones(3), width=32)) == 32


def test_views_pair_clips_with_their_runs_and_describe_them():
    clips = [
        types.SimpleNamespace(waveform=np.zeros(24000, np.float32), sampling_rate=16000),
        types.SimpleNamespace(waveform=np.zeros(8000, np.float32), sampling_rate=16000),
    ]
    first, second = audio_views(clips, [(3, 40)])
    assert (first.seconds, first.tokens, first.span) == (1.5, 37, (3, 40))
    assert (second.seconds, second.tokens, second.span) == (0.5, None, None)
    assert describe_audio(0, first) == "audio 1: 1.50 s at 16000 Hz, 37 tokens at [3:40]"
    assert describe_audio(1, second) == "audio 2: 0.50 s at 16000 Hz"
    assert isinstance(first, AudioView) and base64.b64decode(first.png).startswith(b"\x89PNG")


def test_audio_tokens_collapse_into_their_own_span():
    tokenizer = types.SimpleNamespace(
        decode=lambda ids, skip_special_tokens=False: "".join(f"t{i}" for i in ids),
        convert_ids_to_tokens=lambda i: "<|AUDIO|>" if i == AUDIO else "<image>",
    )
    ids = [1, AUDIO, AUDIO, AUDIO, 2, 5, 5]
    labels = [-100] * 5 + [5, 5]
    spans = render_spans(tokenizer, ids, labels, -100, image_id=5, audio_id=AUDIO)
    assert [(s.kind, s.count, s.loss) for s in spans] == [
        ("text", 1, False),
        ("audio", 3, False),
        ("text", 1, False),
        ("image", 2, True),
    ]
    assert spans[1].text == "[<|AUDIO|> x3]"


@pytest.mark.parametrize("has_hooks", [True, False])
def test_only_an_encoder_with_the_hooks_is_asked_for_clips(has_hooks):
    batch = types.SimpleNamespace(input_ids=np.zeros((2, 4)))
    clip = types.SimpleNamespace(waveform=np.zeros(10), sampling_rate=16000)
    calls = []
    encoder = types.SimpleNamespace()
    if has_hooks:
        encoder.keep_preview_audio = lambda: calls.append("keep")
        encoder.preview_audios = lambda batch: [[clip]]  # a row short: the second gets none
    assert keep_preview_audio(encoder) is has_hooks and calls == (["keep"] if has_hooks else [])
    assert row_audio_clips(encoder, batch) == ([[clip], []] if has_hooks else [[], []])
