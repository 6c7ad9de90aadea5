"""``preview`` shows each audio clip as fed to the processor: a waveform strip in the HTML page,
a sparkline with its length and sampling rate in the terminal, and its audio-token span.

A real Energon dataset holds a WAV of half a second of silence, then a second of a tone (at
22.05 kHz, resampled to the feature extractor's 16 kHz), and a sample with two clips. The
strip must show silence where the file is silent and the tone where it sounds; with the audio
budget clipping the clip, it must show the clipped waveform (what the processor got), not the
file.
"""

import base64
import io
import re
import wave

import numpy as np
import pytest

from energon_plugins.testing import collect_rows, encode_tone, render_page

FAMILY = "qwen2-audio"
RATE = 16000
SILENCE_S, TONE_S = 0.5, 1.0
#: The colour of the waveform bars in the strip (energon_plugins.preview.audio).
WAVE_RGB = (200, 120, 20)
#: The 32-column sparkline of the silence-then-tone clip: a third silent, a column where the
#: tone starts, then the tone.
QUIET_THEN_TONE = r"▁{10}[▁-█]█{21}"


def silence_then_tone() -> bytes:
    """A 22.05 kHz mono 16-bit WAV: ``SILENCE_S`` of zeros, then ``TONE_S`` of a 440 Hz tone at
    amplitude 0.5."""
    rate = 22050
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(int(rate * TONE_S)) / rate)
    samples = np.concatenate([np.zeros(int(rate * SILENCE_S)), tone])
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((samples * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


SAMPLES = {
    "quiet-then-tone": (
        [("wav", silence_then_tone())],
        [{"from": "human", "value": "<audio>\nWhen does it start?"}, {"from": "gpt", "value": "Later."}],
    ),
    "two-clips": (
        [("flac", encode_tone("flac", 0.8, 16000, 330)), ("wav", encode_tone("wav", 0.6, 44100, 550))],
        [
            {"from": "human", "value": "<audio><audio>Which is longer?"},
            {"from": "gpt", "value": "The first."},
        ],
    ),
    "no-audio": ([], [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]),
}
#: Seconds of each sample's clips as the processor gets them (no budget).
SECONDS = {"quiet-then-tone": [SILENCE_S + TONE_S], "two-clips": [0.8, 0.6], "no-audio": []}


@pytest.fixture(scope="module")
def audio_preview_data(tmp_path_factory):
    """The crude ``chatml`` dataset of :data:`SAMPLES`."""
    from energon_plugins.testing import write_crude_dataset

    path = tmp_path_factory.mktemp("audio-preview")
    samples = [(key, [], conversation, [], files) for key, (files, conversation) in SAMPLES.items()]
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return path


@pytest.fixture(scope="module")
def processor(processor_dirs):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True)


def tokens_of_clip(processor, seconds: float) -> int:
    """How many audio tokens the processor itself writes for a clip of ``seconds``."""
    out = processor(
        text="<|audio_bos|><|AUDIO|><|audio_eos|>",
        audio=[np.zeros(int(round(seconds * RATE)), np.float32)],
        sampling_rate=RATE,
    )
    return int((np.asarray(out["input_ids"][0]) == processor.audio_token_id).sum())


def strip_pixels(png: str) -> np.ndarray:
    """The strip's ``(H, W)`` mask of waveform-coloured pixels."""
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB"))
    return (pixels == np.asarray(WAVE_RGB)).all(axis=2)


def rows_by_key(rows):
    """Each sample's first row (packed rows split into their samples' keys)."""
    out = {}
    for row in rows:
        out.setdefault(row["key"], row)
    return out


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_preview_draws_each_clip_fed_to_the_processor(
    packed, processor, processor_dirs, audio_preview_data, make_datamodule
):
    dm = make_datamodule(audio_preview_data, processor_dirs[FAMILY], processor.tokenizer, packed=packed)
    rows = collect_rows(dm, 2 if packed else 6)  # a packed row holds every sample
    seen = set()
    for row in rows:
        keys = row["key"].split(",")
        seen.update(keys)
        expected = [s for key in keys for s in SECONDS[key]]
        audios = row["audios"]
        assert [round(a.seconds, 2) for a in audios] == expected, row["key"]
        assert all(a.sampling_rate == RATE for a in audios)
        # each clip's span holds exactly the processor's count of audio tokens for its length
        assert [a.tokens for a in audios] == [tokens_of_clip(processor, s) for s in expected]
        ids = []
        for spans in row["spans"]:
            ids += [s for s in spans if s.kind == "audio"]
        assert [s.count for s in ids] == [a.tokens for a in audios]
        assert all(s.text == f"[<|AUDIO|> x{s.count}]" and not s.loss for s in ids)
        assert not row["note"], row["note"]
    assert seen == set(SAMPLES)
    assert packed == any("," in row["key"] for row in rows)
    page = render_page("preview", rows)
    assert page.count("alt='waveform'") == sum(len(r["audios"]) for r in rows) >= 3
    assert page.count("class='aud'") == sum(len(r["audios"]) for r in rows)


def test_the_strip_shows_silence_and_tone_where_they_are(
    processor, processor_dirs, audio_preview_data, make_datamodule
):
    dm = make_datamodule(audio_preview_data, processor_dirs[FAMILY], processor.tokenizer, packed=False)
    (clip,) = rows_by_key(collect_rows(dm, 4))["quiet-then-tone"]["audios"]
    drawn = strip_pixels(clip.png)
    height, width = drawn.shape
    assert width >= 200 and height >= 16, "a strip wide enough to see the onset"
    heights = drawn.sum(axis=0)
    onset = int(width * SILENCE_S / (SILENCE_S + TONE_S))
    assert heights[: onset - 2].max() <= 1  # silence: a dot on the zero line
    # the tone (amplitude 0.5): bars over half the height, centred on the zero line
    assert np.all(np.abs(heights[onset + 2 :] - height / 2) <= 3)
    assert re.fullmatch(QUIET_THEN_TONE, clip.sparkline), clip.sparkline


def test_a_clipped_clip_is_shown_as_clipped(processor, processor_dirs, audio_preview_data, make_datamodule):
    """Under ``audio.max_seconds: 1, over_budget: clip`` the processor gets the first second:
    half silence, half tone; the strip shows that, not the file's 1.5 s."""
    dm = make_datamodule(
        audio_preview_data,
        processor_dirs[FAMILY],
        processor.tokenizer,
        packed=False,
        audio={"max_seconds": 1.0, "over_budget": "clip"},
    )
    (clip,) = rows_by_key(collect_rows(dm, 4))["quiet-then-tone"]["audios"]
    assert round(clip.seconds, 2) == 1.0 and clip.tokens == tokens_of_clip(processor, 1.0)
    heights = strip_pixels(clip.png).sum(axis=0)
    half = heights.size // 2
    assert heights[: half - 2].max() <= 1 and heights[half + 2 :].min() >= 20
    assert re.fullmatch(r"▁{16}█{16}", clip.sparkline), clip.sparkline


def test_preview_command_prints_the_sparkline_and_the_audio_span(
    processor, processor_dirs, audio_preview_data, tmp_path
):
    """``energon-plugins preview CONFIG``: per clip a line with its sparkline, length, rate and
    token span; the audio tokens collapsed in the text, as many as the processor wrote."""
    import yaml

    from energon_plugins import run_cli

    config = tmp_path / "audio.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "path": str(audio_preview_data),
                "tokenizer": {"path": str(processor_dirs[FAMILY])},
                "seq_length": 512,
                "micro_batch_size": 1,
                "num_workers": 0,
                "task_encoder": {"name": "hf-processor", "options": {"padding": "longest"}},
            }
        )
    )
    page = tmp_path / "preview.html"
    result = run_cli(["preview", str(config), "-n", "6", "--html", str(page)])
    assert result.exit_code == 0, result.output
    tokens = tokens_of_clip(processor, SILENCE_S + TONE_S)
    line = re.search(r"audio 1: (\S+) 1\.50 s at 16000 Hz, (\d+) tokens at \[(\d+):(\d+)\]", result.output)
    assert line, result.output
    sparkline, count, start, end = line.group(1), *(int(g) for g in line.groups()[1:])
    assert re.fullmatch(QUIET_THEN_TONE, sparkline) and count == tokens == end - start
    assert f"[<|AUDIO|> x{tokens}]" in result.output
    assert "audio 2: " in result.output and "1 audio clip(s)" in result.output
    assert page.read_text(encoding="utf-8").count("alt='waveform'") >= 3
