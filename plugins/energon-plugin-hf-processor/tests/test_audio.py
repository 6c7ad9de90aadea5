"""Audio through the ``hf-processor`` encoder, token-identical to the processor's own output.

A real Energon dataset holds sine tones written by PyAV as WAV, FLAC, MP3, Ogg (Opus) and
M4A (AAC) files at several sampling rates and lengths: one clip per sample, two in one
multi-turn conversation, next to a text-only sample. Read through the datamodule (unpacked
and packed), every sample's ids, labels, ``input_features`` and ``feature_attention_mask``
must equal ``processor.apply_chat_template(messages, tokenize=True, ...)`` given the same
files decoded by plain PyAV (every frame, resampled to 16 kHz mono by libswresample), for
Qwen2-Audio, Qwen2.5-Omni, Qwen3-Omni and Gemma 4, and (the samples of one clip or none) GLM-ASR,
Audio Flamingo 3 and Music Flamingo, whose processors take one clip per text: their two-clip
sample is skipped and counted (``audio_count``). A tiny model of each consumes the batches;
packed batches resume exactly. Skips, the budget and bad options: ``test_audio_skips.py``.
"""

import pytest
import torch
from energon_plugin_hf_processor.families import family_for

from energon_plugins.testing import decode_every_sample, encode_tone

FAMILY = "qwen2-audio"
#: Families whose processor takes one clip per text (``FamilySpec.max_audio_clips`` 1).
ONE_CLIP_FAMILIES = ("glmasr", "audioflamingo3", "musicflamingo", "qwen3-asr")
#: Families whose tiny processor takes audio (Qwen2.5-Omni's and Gemma 4's take images and
#: videos too).
AUDIO_FAMILIES = (
    "qwen2-audio",
    "qwen2.5-omni",
    "gemma4",
    "gemma4-unified",
    "gemma3n",
    "qwen3-omni",
    "phi4-multimodal",
    "moss-transcribe-diarize",
    *ONE_CLIP_FAMILIES,
)
#: The audio inputs of those families.
AUDIO_KEYS = ("input_features", "feature_attention_mask", "input_features_mask", "audio_input_features")
RATE = 16000
# key -> (audio clips as (ext, seconds, sampling rate, tone Hz), conversation)
AUDIO_SAMPLES = {
    "tone-wav": (
        [("wav", 1.3, 16000, 440)],
        [{"from": "human", "value": "<audio>\nWhat do you hear?"}, {"from": "gpt", "value": "A tone."}],
    ),
    "tone-flac": (
        [("flac", 2.2, 22050, 330)],
        [
            {"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "Pitch?"}]},
            {"role": "assistant", "content": "Low."},
        ],
    ),
    "two-clips": (
        [("mp3", 1.0, 44100, 550), ("ogg", 0.7, 48000, 660)],
        [
            {"from": "human", "value": "<audio><audio>Which is longer?"},
            {"from": "gpt", "value": "The first one."},
            {"from": "human", "value": "And the second?"},
            {"from": "gpt", "value": "Shorter."},
        ],
    ),
    "tone-m4a": (
        [("m4a", 0.9, 24000, 440)],
        [  # one clip, two turns (the multi-turn sample of the one-clip families)
            {"from": "human", "value": "<audio>Again?"},
            {"from": "gpt", "value": "Yes."},
            {"from": "human", "value": "Sure?"},
            {"from": "gpt", "value": "Sure."},
        ],
    ),
    "no-media": (
        [],
        [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello."}],
    ),
}


@pytest.fixture(scope="session")
def audio_data(tmp_path_factory):
    """A crude ``chatml`` dataset of :data:`AUDIO_SAMPLES`; ``originals[key] = (waveforms,
    conversation)`` with each clip decoded by plain PyAV."""
    from energon_plugins.testing import write_crude_dataset

    path = tmp_path_factory.mktemp("audio")
    samples, originals = [], {}
    for key, (clips, conversation) in AUDIO_SAMPLES.items():
        files = [(ext, encode_tone(ext, *spec)) for ext, *spec in clips]
        samples.append((key, [], conversation, [], files))
        originals[key] = ([decode_every_sample(data, RATE) for _, data in files], conversation)
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return path, originals


def taken_samples(originals, spec):
    """The samples of ``originals`` with no more clips than ``spec``'s processor takes."""
    limit = spec.max_audio_clips
    return {key: value for key, value in originals.items() if limit is None or len(value[0]) <= limit}


def hf_audio_messages(golden, conversation, waveforms):
    """The conversation as ``apply_chat_template`` takes it, each audio tag an audio part."""
    clips = iter(waveforms)
    messages = []
    for message in golden.hf_messages(conversation, []):
        parts = []
        for part in message["content"]:
            if part["type"] != "text" or "<audio>" not in part["text"]:
                parts.append({"type": "audio", "audio": next(clips)} if part["type"] == "audio" else part)
                continue
            pieces = part["text"].split("<audio>")
            for i, piece in enumerate(pieces):
                if i:
                    parts.append({"type": "audio", "audio": next(clips)})
                if piece.strip():
                    parts.append({"type": "text", "text": piece.strip() if i else piece.rstrip()})
        messages.append({"role": message["role"], "content": parts})
    return messages


def with_filled_masks(ref, spec):
    """``ref``'s outputs with the frame mask a one-clip call leaves out (``filled_masks``):
    all true, as the processor's call on several clips gives it."""
    out = dict(ref)
    for mask, features in spec.filled_masks.items():
        if mask not in out and features in out:
            out[mask] = torch.ones(out[features].shape[:2], dtype=torch.bool)
    return out


def reference(processor, golden, originals, key):
    """The processor's own output for sample ``key``."""
    waveforms, conversation = originals[key]
    return processor.apply_chat_template(
        hf_audio_messages(golden, conversation, waveforms),
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"sampling_rate": RATE},
    )


@pytest.fixture(scope="session")
def audio_processor(processor_dirs):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True)


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_audio_batches_equal_the_processors_output(
    family, packed, processor_dirs, audio_data, make_datamodule, every_batch, golden
):
    from transformers import AutoProcessor

    path, originals = audio_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    # transformers 5.24 drops Phi4MultimodalProcessor's template on load (test_golden.py)
    processor.chat_template = processor.chat_template or processor.tokenizer.chat_template
    spec = family_for(processor)
    assert spec.name == family
    taken = taken_samples(originals, spec)  # a sample with more clips is skipped: never read
    dm = make_datamodule(path, processor_dirs[family], processor.tokenizer, packed=packed)
    checked, packed_rows = set(), 0
    for batch in every_batch(dm, list(taken)):
        row_keys = [key.split(",") for key in batch.__key__]
        refs = [reference(processor, golden, originals, k) for keys in row_keys for k in keys]
        visual = batch.visual or {}
        filled = [with_filled_masks(ref, spec) for ref in refs]
        for key in spec.visual:  # audio features combined by the family's rule
            parts = [ref[key] for ref in filled if key in ref]
            if parts:
                assert torch.equal(visual[key], spec.combine(key)(parts)), key
            else:
                assert key not in visual, key
        assert any(key in visual for key in AUDIO_KEYS) == any(
            key in ref for ref in refs for key in AUDIO_KEYS
        )
        keyed = dict(zip((k for keys in row_keys for k in keys), refs))
        rows = golden.checked_rows(
            batch,
            keyed,
            processor.tokenizer,
            lambda key: golden.answers(originals[key][1]),
            golden.END_OF_TURN[family],
            spec.token_fields,
        )
        checked.update(key for _, key, *_ in rows)
        packed_rows += sum(len(keys) > 1 for keys in row_keys)
    assert checked == set(taken)
    assert (packed_rows > 0) == packed


def test_each_clip_takes_the_tokens_its_length_gives(audio_processor, audio_data, golden):
    """Two clips, two ``<|AUDIO|>`` runs, each as long as its kept frames give (Qwen2-Audio's
    two stride-2 stages: 40 ms a token); the longer clip takes more."""
    path, originals = audio_data
    ref = reference(audio_processor, golden, originals, "two-clips")
    audio_id = audio_processor.tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    runs = "".join("a" if t == audio_id else " " for t in ref["input_ids"][0].tolist()).split()
    frames = ref["feature_attention_mask"].sum(-1).tolist()
    assert [len(run) for run in runs] == [(((n - 1) // 2 + 1) - 2) // 2 + 1 for n in frames]
    assert len(runs[0]) > len(runs[1]) > 0


def test_stats_count_the_audio_tokens_of_the_batches(
    processor_dirs, audio_processor, audio_data, make_datamodule
):
    """``stats()``'s ``audio_tokens`` are the positions of the encoder's audio token in the
    batches read (and the clips' tokens are no image or video tokens)."""
    path, originals = audio_data
    dm = make_datamodule(path, processor_dirs[FAMILY], audio_processor.tokenizer, packed=False)
    audio_id = audio_processor.tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    loader = dm.train_dataloader()
    batches = [next(loader) for _ in range(len(originals))]
    stats = loader.stats()
    loader.close()
    read = sum(int((batch.input_ids == audio_id).sum()) for batch in batches)
    assert read > 0
    assert sum(counters["audio_tokens"] for counters in stats.values()) == read
    assert sum(counters["image_tokens"] + counters["video_tokens"] for counters in stats.values()) == 0


def audio_model(family, tok):
    """A random model of ``family`` with an audio tower (Gemma 4's tiny spec has none)."""
    from energon_plugin_hf_processor.tiny import TINY_SPECS

    model = TINY_SPECS[family].model(tok)
    if family != "gemma4":
        return model
    import transformers

    config = model.config
    config.audio_config = transformers.Gemma4AudioConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        subsampling_conv_channels=[128, 4],  # transformers sizes its projection by the first = mel bins
        output_proj_dims=32,
    )
    return transformers.Gemma4ForConditionalGeneration(config)


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_a_tiny_model_consumes_audio_batches(
    family, processor_dirs, audio_data, make_datamodule, every_batch
):
    """The models check the audio features against the audio tokens (Qwen2-Audio's
    ``<|AUDIO|>``, Gemma 4's ``<|audio|>``): the loss is finite on every batch."""
    from transformers import AutoProcessor

    path, originals = audio_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    tok = processor.tokenizer
    taken = taken_samples(originals, family_for(processor))
    torch.manual_seed(0)
    model = audio_model(family, tok).eval()
    dm = make_datamodule(path, processor_dirs[family], tok, packed=False)
    clips = 0
    for batch in every_batch(dm, list(taken)):
        kwargs = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask.long(),
            "labels": batch.labels,
            **(batch.visual or {}),
            **(batch.token_fields or {}),
        }
        with torch.no_grad():
            out = model(**kwargs)
        assert torch.isfinite(out.loss), batch.__key__
        visual = batch.visual or {}
        features = [visual[key] for key in ("input_features", "audio_input_features") if key in visual]
        clips += len(features[0]) if features else 0
    assert clips == sum(len(w) for w, _ in taken.values())


@pytest.mark.bad_input
@pytest.mark.parametrize("family", ONE_CLIP_FAMILIES)
def test_more_clips_than_the_processor_takes_are_skipped_and_counted_or_raise(
    family, processor_dirs, audio_data, make_datamodule, every_batch
):
    """The two-clip sample never reaches a one-clip processor (which would raise inside
    transformers): it is skipped and counted as ``audio_count``, or, under ``on_error: raise``,
    an error names the sample, the family and its limit."""
    from transformers import AutoProcessor

    path, originals = audio_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    assert family_for(processor).max_audio_clips == 1
    taken = taken_samples(originals, family_for(processor))
    assert set(originals) - set(taken) == {"two-clips"}
    dm = make_datamodule(path, processor_dirs[family], processor.tokenizer, packed=False)
    seen = {k for batch in every_batch(dm, list(taken)) for key in batch.__key__ for k in key.split(",")}
    assert seen == set(taken)
    counts = dm.skip_counts()
    assert set(counts) == {"audio_count"} and counts["audio_count"] >= 1, counts
    raising = make_datamodule(
        path, processor_dirs[family], processor.tokenizer, packed=False, on_error="raise"
    )
    expected = rf"\(audio_count\): sample 'two-clips': 2 audio clips > 1, the most family '{family}' takes"
    with pytest.raises(Exception, match=expected):
        for _ in every_batch(raising, list(originals)):
            pass


# ------------------------------------------------------------------ packing and resume
def resume_loader(path, processor_dir, tok):
    import energon_plugins

    strategy = energon_plugins.create("packing_strategy", "best-fit-decreasing", {"carry_over": True})
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=160,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=3,
        packing=strategy,
        packing_buffer_size=4,
        task_encoder={
            "name": "hf-processor",
            "options": {"processor": str(processor_dir), "padding": "longest"},
        },
        batch_format=None,
    ).train_dataloader()


def test_packing_with_audio_resumes_exactly(processor_dirs, audio_processor, audio_data):
    """A restored loader continues with the same packed batches, audio features and all."""
    path, _ = audio_data
    tok = audio_processor.tokenizer
    first = resume_loader(path, processor_dirs[FAMILY], tok)
    for _ in range(2):
        next(first)
    state = first.save_state()
    expected = [next(first) for _ in range(3)]
    second = resume_loader(path, processor_dirs[FAMILY], tok)
    second.restore_state(state)
    clips = 0
    audio_id = tok.convert_tokens_to_ids("<|AUDIO|>")
    for want in expected:
        got = next(second)
        assert got.__key__ == want.__key__
        assert torch.equal(got.input_ids, want.input_ids)
        assert (got.visual or {}).keys() == (want.visual or {}).keys()
        for key, value in (want.visual or {}).items():
            assert torch.equal(got.visual[key], value)
        mask = (want.visual or {}).get("feature_attention_mask")
        tokens = int((want.input_ids == audio_id).sum())
        frames = mask.sum(-1) if mask is not None else torch.zeros(0, dtype=torch.long)
        assert tokens == int(((((frames - 1) // 2 + 1) - 2) // 2 + 1).sum())
        clips += len(frames)
    assert clips > 0
