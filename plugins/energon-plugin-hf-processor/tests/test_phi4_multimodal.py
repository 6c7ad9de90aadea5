"""Phi-4-multimodal batches are what the processor's own call on the whole batch gives.

The golden tests (``test_golden.py``, ``test_audio.py``) compare each sample with the
processor's call on that sample alone. Phi-4-multimodal's processor shapes a call on several
samples further: it pads every image's crops to the most crops with all-visible crop masks,
and gives one ``audio_attention_mask`` row per clip, which a call on one clip leaves out. A
real Energon dataset of two samples (images of 3 and 2 crops, one clip and two clips) read
through the datamodule must equal ``processor(text=[...], images=..., audio=...)`` on both
at once, and a tiny model trains on it with finite gradients.
"""

import pytest
import torch

from energon_plugins.testing import decode_every_sample, encode_tone

FAMILY = "phi4-multimodal"
RATE = 16000
# key -> (image size, audio clips as (ext, seconds, sampling rate, tone Hz), conversation)
SAMPLES = {
    "wide-one-clip": (
        (90, 50),  # two 64-pixel crops and the global view
        [("wav", 1.3, 16000, 440)],
        [{"from": "human", "value": "<image><audio>What is it?"}, {"from": "gpt", "value": "A tone."}],
    ),
    "small-two-clips": (
        (30, 30),  # one crop and the global view: its crops are padded by one
        [("flac", 0.7, 22050, 330), ("wav", 1.1, 16000, 550)],
        [
            {"from": "human", "value": "<image><audio><audio>Which clip is longer?"},
            {"from": "gpt", "value": "The second."},
        ],
    ),
}


@pytest.fixture(scope="module")
def phi4_data(tmp_path_factory, make_image):
    """A crude ``chatml`` dataset of :data:`SAMPLES` (one shard) and each sample's image,
    waveforms (decoded by plain PyAV at 16 kHz) and conversation."""
    from energon_plugins.testing import write_crude_dataset

    path = tmp_path_factory.mktemp("phi4")
    samples, originals = [], {}
    for n, (key, (size, clips, conversation)) in enumerate(SAMPLES.items()):
        image = make_image(size, n)
        files = [(ext, encode_tone(ext, *spec)) for ext, *spec in clips]
        samples.append((key, [image], conversation, [], files))
        originals[key] = (image, [decode_every_sample(data, RATE) for _, data in files], conversation)
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return path, originals


@pytest.fixture(scope="module")
def phi4_processor(processor_dirs):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True)
    # transformers 5.24 drops Phi4MultimodalProcessor's template on load (its __init__ does
    # not name it); the tokenizer keeps it, as the checkpoint's conversion script copies it.
    assert processor.chat_template is None and processor.tokenizer.chat_template
    processor.chat_template = processor.tokenizer.chat_template
    return processor


def with_audio_parts(messages):
    """``messages`` with each ``<audio>`` tag of a text part an audio part (as
    ``test_audio.hf_audio_messages`` splits them)."""
    out = []
    for message in messages:
        parts = []
        for part in message["content"]:
            if part["type"] != "text" or "<audio>" not in part["text"]:
                parts.append(part)
                continue
            for i, piece in enumerate(part["text"].split("<audio>")):
                if i:
                    parts.append({"type": "audio"})
                if piece.strip():
                    parts.append({"type": "text", "text": piece.strip() if i else piece.rstrip()})
        out.append({"role": message["role"], "content": parts})
    return out


def whole_batch_call(processor, golden, originals, keys):
    """The processor's own call on the samples ``keys`` at once (images and clips in order)."""
    texts, images, clips = [], [], []
    for key in keys:
        image, waveforms, conversation = originals[key]
        messages = with_audio_parts(golden.hf_messages(conversation, [image]))
        texts.append(processor.apply_chat_template(messages, tokenize=False))
        images.append(image)
        clips.extend(waveforms)
    return processor(
        text=texts, images=images, audio=clips, sampling_rate=RATE, padding=True, return_tensors="pt"
    )


def one_batch(make_datamodule, every_batch, path, processor_dir, tokenizer):
    """The batch holding both samples (one shard of two, micro-batches of two, unpacked)."""
    dm = make_datamodule(path, processor_dir, tokenizer, packed=False)
    batch = next(iter(every_batch(dm, list(SAMPLES))))
    assert sorted(batch.__key__) == sorted(SAMPLES)
    return batch


def test_a_batch_equals_the_processors_call_on_the_whole_batch(
    phi4_processor, phi4_data, processor_dirs, make_datamodule, every_batch, golden
):
    path, originals = phi4_data
    batch = one_batch(make_datamodule, every_batch, path, processor_dirs[FAMILY], phi4_processor.tokenizer)
    ref = whole_batch_call(phi4_processor, golden, originals, batch.__key__)
    visual = batch.visual
    assert visual["image_pixel_values"].shape[:2] == (2, 3)  # 3 and 2 crops, padded to 3
    for key in ("image_pixel_values", "image_sizes", "image_attention_mask", "audio_embed_sizes"):
        assert torch.equal(visual[key], ref[key]), key
    assert visual["image_attention_mask"][batch.__key__.index("small-two-clips"), 2].all()
    # One mask row per clip (the one-clip sample's call has none), padded to the longest clip.
    assert visual["audio_attention_mask"].shape[0] == 3
    assert torch.equal(visual["audio_attention_mask"], ref["audio_attention_mask"])
    # Every clip's frames are the batched call's; past its mask they may differ (the padding
    # is zeros, where the batched call can leave one frame of the clip's tail), unread.
    features, mask = visual["audio_input_features"], visual["audio_attention_mask"]
    assert features.shape == ref["audio_input_features"].shape and (~mask).any()
    torch.testing.assert_close(features[mask], ref["audio_input_features"][mask])
    for row in range(2):
        n = int(batch.attention_mask[row].sum())
        assert torch.equal(batch.input_ids[row, :n], ref["input_ids"][row][ref["attention_mask"][row].bool()])


def test_a_tiny_model_trains_on_the_batch(
    phi4_processor, phi4_data, processor_dirs, make_datamodule, every_batch
):
    """Image and audio embeddings fill their tokens (the model checks the counts); the loss
    and every gradient are finite."""
    from energon_plugin_hf_processor.tiny import TINY_SPECS

    path, _ = phi4_data
    tok = phi4_processor.tokenizer
    batch = one_batch(make_datamodule, every_batch, path, processor_dirs[FAMILY], tok)
    torch.manual_seed(0)
    model = TINY_SPECS[FAMILY].model(tok).train()
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask.long(),
        labels=batch.labels,
        **batch.visual,
    )
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    image_id, audio_id = tok.convert_tokens_to_ids(["<|image|>", "<|audio|>"])
    assert int((batch.input_ids == audio_id).sum()) == int(batch.visual["audio_embed_sizes"].sum())
    assert int((batch.input_ids == image_id).sum()) == int(batch.image_token_counts.sum())
