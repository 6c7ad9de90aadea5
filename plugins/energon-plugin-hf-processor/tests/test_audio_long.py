"""Clips longer than Whisper's 30 s window: each processor reads as much as it takes.

Qwen2-Audio's feature extractor reads 30 s and drops the rest, so the encoder decodes no more;
GLM-ASR and Audio Flamingo 3 cut long audio into several 30 s windows themselves (up to their
``max_audio_len``), so the encoder must decode the whole clip for them. A 41 s tone read
through the datamodule must equal the processor's own output on the whole file.
"""

import pytest
import torch
from energon_plugin_hf_processor.families import family_for

from energon_plugins.testing import decode_every_sample, encode_tone, write_crude_dataset

RATE = 16000
SECONDS = 41.0
CONVERSATION = [{"from": "human", "value": "<audio>What is it?"}, {"from": "gpt", "value": "A tone."}]


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    """A one-sample dataset of a 41 s WAV tone; ``(path, waveform)``."""
    path = tmp_path_factory.mktemp("long-audio")
    data = encode_tone("wav", SECONDS, RATE, 440)
    samples = [("long", [], CONVERSATION, [], [("wav", data)])]
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=1, split_ratio=(("train", 1.0),))
    return path, decode_every_sample(data, RATE)


@pytest.mark.parametrize("family", ["glmasr", "audioflamingo3", "qwen2-audio"])
def test_a_long_clip_is_read_as_far_as_the_processor_reads(
    family, processor_dirs, long_clip, make_datamodule, every_batch
):
    from transformers import AutoProcessor

    path, waveform = long_clip
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    spec = family_for(processor)
    dm = make_datamodule(path, processor_dirs[family], processor.tokenizer, packed=False)
    window = dm.task_encoder.audio.window_seconds
    assert (window > SECONDS) == (family != "qwen2-audio"), window
    messages = [
        {
            "role": "user",
            "content": [{"type": "audio", "audio": waveform}, {"type": "text", "text": "What is it?"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A tone."}]},
    ]
    ref = processor.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"sampling_rate": RATE},
    )
    (batch,) = list(every_batch(dm, ["long"]))
    length = ref["input_ids"].shape[1]
    assert torch.equal(batch.input_ids[0, :length], ref["input_ids"][0]), (
        "as many audio tokens as the processor's"
    )
    # a batch of two rows: the one sample twice (the training loader repeats its split)
    want = ref["input_features"]
    got = batch.visual["input_features"][: want.shape[0]]
    assert torch.equal(got, want), (got - want).abs().max()
    for mask in ("input_features_mask", "feature_attention_mask"):
        if mask in ref and mask in spec.visual:
            assert torch.equal(batch.visual[mask][: want.shape[0]].bool(), ref[mask].bool()), mask
