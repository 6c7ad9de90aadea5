"""Audio that is skipped, budgeted or refused by the ``hf-processor`` encoder.

Real audio files (written by PyAV) in real Energon datasets, read through the datamodule:
corrupt and truncated files are skipped and counted as ``audio`` (or raise naming the file),
the audio budget skips samples over ``audio.max_seconds`` (``audio_too_long``) or keeps their
first seconds, audio for a processor without a feature extractor is skipped and counted, and
bad ``audio`` options name the field.
"""

import pytest

from energon_plugins.testing import encode_tone

FAMILY = "qwen2-audio"


@pytest.fixture(scope="session")
def audio_processor(processor_dirs):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True)


# ------------------------------------------------------------------ skips and budget
def audio_datamodule(path, processor_dir, tok, *, seq_length=1024, **options):
    import energon_plugins

    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=seq_length,
        micro_batch_size=1,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={"name": "hf-processor", "options": {"processor": str(processor_dir), **options}},
        batch_format=None,
    )


ASK = [{"from": "human", "value": "<audio>What?"}, {"from": "gpt", "value": "A tone."}]


def test_corrupt_and_truncated_audio_is_skipped_and_counted_or_raises(
    processor_dirs, audio_processor, tmp_path
):
    from energon_plugins.testing import write_crude_dataset

    good = encode_tone("flac", 1.0, 16000, 440)
    write_crude_dataset(
        tmp_path,
        [
            ("good", [], ASK, [], [("flac", good)]),
            ("garbage", [], ASK, [], [("wav", b"RIFF" + b"\x00" * 300)]),
            ("cut", [], ASK, [], [("flac", good[:40])]),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )
    tok = audio_processor.tokenizer
    skipping = audio_datamodule(tmp_path, processor_dirs[FAMILY], tok, on_error="skip")
    loader = skipping.train_dataloader()
    assert [next(loader).__key__[0] for _ in range(2)] == ["good", "good"]
    assert skipping.skip_counts() == {"audio": 2}
    with pytest.raises(Exception, match=r"\(audio\): audio 'garbage.0.wav' in shard 'shard-000001.tar'"):
        raising = audio_datamodule(tmp_path, processor_dirs[FAMILY], tok, on_error="raise").train_dataloader()
        for _ in range(3):
            next(raising)


@pytest.fixture(scope="session")
def long_and_short(tmp_path_factory):
    """A 3 s clip, a 1 s clip, and a sample with two 1.5 s clips."""
    from energon_plugins.testing import write_crude_dataset

    path = tmp_path_factory.mktemp("audio-budget")
    two = [{"from": "human", "value": "<audio><audio>What?"}, {"from": "gpt", "value": "Two tones."}]
    write_crude_dataset(
        path,
        [
            ("long", [], ASK, [], [("wav", encode_tone("wav", 3.0, 16000, 440))]),
            ("short", [], ASK, [], [("wav", encode_tone("wav", 1.0, 16000, 440))]),
            ("pair", [], two, [], [("wav", encode_tone("wav", 1.5, 8000, 440))] * 2),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )
    return path


def test_the_audio_budget_skips_long_samples_and_counts_them(processor_dirs, audio_processor, long_and_short):
    dm = audio_datamodule(
        long_and_short, processor_dirs[FAMILY], audio_processor.tokenizer, audio={"max_seconds": 2}
    )
    loader = dm.train_dataloader()
    assert [next(loader).__key__[0] for _ in range(2)] == ["short", "short"]
    counts = dm.skip_counts()  # "long" (3 s) and "pair" (2 x 1.5 s), each time they come up
    assert set(counts) == {"audio_too_long"} and counts["audio_too_long"] >= 2


def test_the_audio_budget_clips_to_the_first_seconds(processor_dirs, audio_processor, long_and_short):
    """``over_budget: clip`` keeps the first 2 s of each sample: the 3 s clip is cut to 2 s,
    the pair keeps 1.5 s + 0.5 s; only the kept seconds take features and tokens."""
    dm = audio_datamodule(
        long_and_short,
        processor_dirs[FAMILY],
        audio_processor.tokenizer,
        audio={"max_seconds": 2, "over_budget": "clip"},
    )
    loader = dm.train_dataloader()
    frames = {}
    for _ in range(3):
        batch = next(loader)
        frames[batch.__key__[0]] = batch.visual["feature_attention_mask"].sum(-1).tolist()
    assert frames == {"long": [200], "short": [100], "pair": [150, 50]}  # 10 ms frames
    assert dm.skip_counts() == {}


def test_audio_for_a_processor_without_audio_is_skipped_and_counted(processor_dirs, tmp_path):
    from transformers import AutoProcessor

    from energon_plugins.testing import write_crude_dataset

    write_crude_dataset(
        tmp_path,
        [
            ("heard", [], ASK, [], [("wav", encode_tone("wav", 0.5, 16000, 440))]),
            ("text", [], [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hi."}]),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )
    tok = AutoProcessor.from_pretrained(processor_dirs["qwen2-vl"], local_files_only=True).tokenizer
    dm = audio_datamodule(tmp_path, processor_dirs["qwen2-vl"], tok)
    loader = dm.train_dataloader()
    assert [next(loader).__key__[0] for _ in range(2)] == ["text", "text"]
    assert dm.skip_counts() == {"audio": 1}


# ------------------------------------------------------------------ options
@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("audio", "field"),
    [
        ({"max_seconds": 0}, "audio.max_seconds"),
        ({"max_seconds": -2.5}, "audio.max_seconds"),
        ({"over_budget": "cut"}, "audio.over_budget"),
        ({"tag": ""}, "audio.tag"),
        ({"seconds": 10}, "audio.seconds"),
    ],
)
def test_bad_audio_options_name_the_field(audio, field):
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        HFProcessorOptions(audio=audio)


def test_the_budget_keeps_clips_in_order_and_cuts_the_crossing_one():
    from energon_plugin_hf_processor.audio import kept_windows
    from energon_plugin_hf_processor.audio_options import AudioOptions

    clip = AudioOptions(max_seconds=2.0, over_budget="clip")
    assert kept_windows([1.5, 1.5], clip) == [1.5, 0.5]
    assert kept_windows([3.0], clip) == [2.0]
    assert kept_windows([2.0, 1.0], clip) is None  # the budget ends before the second starts
    assert kept_windows([1.0, 0.5], clip) == [1.0, 0.5]
    assert kept_windows([3.0], AudioOptions(max_seconds=2.0)) is None
    assert kept_windows([30.0, 30.0], AudioOptions()) == [30.0, 30.0]
