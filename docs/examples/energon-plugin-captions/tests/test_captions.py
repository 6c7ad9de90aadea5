"""Tests of the ``captions`` encoder with a real (tiny, offline) tokenizer."""

import torch
from energon_plugin_captions import plugin
from megatron.energon import CaptioningSample
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import energon_plugins

WORDS = ["<pad>", "<eos>", "<unk>", "<image>", "describe", "a", "red", "cat", "dog"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer built offline with the tokenizers library."""
    vocab = {word: i for i, word in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def fake_processor(images, return_tensors="pt"):
    """Stands in for an image processor: one 3x4x4 tensor per image."""
    return {"pixel_values": torch.stack([img[:, :4, :4] for img in images])}


def build(seq_length=64, **options):
    """Build ``captions`` through an isolated registry, as the datamodule would."""
    ctx = energon_plugins.BuildContext(
        tokenizer=tiny_tokenizer(), image_processor=fake_processor, seq_length=seq_length
    )
    with energon_plugins.isolated_registry(plugin, entry_points=False):
        return energon_plugins.create("task_encoder", "captions", options, ctx)


def sample(caption: str) -> CaptioningSample:
    return CaptioningSample(__key__="s0", __restore_key__=(), image=torch.rand(3, 8, 8), caption=caption)


def test_labels_only_on_caption():
    encoder = build(image_tokens=3, prompt="describe")
    out = encoder.encode_sample(sample("a red cat"))
    tok = tiny_tokenizer()
    assert out.input_ids[:3].tolist() == [tok.convert_tokens_to_ids("<image>")] * 3
    kept = out.labels[out.labels != -100]
    assert tok.decode(kept) == "a red cat <eos>"
    assert out.loss_mask.sum().item() == 4
    assert out.pixel_values.shape == (1, 3, 4, 4)


def test_truncated_to_seq_length_and_batched():
    encoder = build(seq_length=6, image_tokens=3)
    samples = [encoder.encode_sample(sample("a red cat dog")), encoder.encode_sample(sample("a"))]
    assert samples[0].length == 6 and samples[0].truncated
    batch = encoder.batch(samples)
    assert batch.input_ids.shape == (2, 6)
    assert batch.labels[1, 5].item() == -100  # padding is ignored by the loss


def test_packs_with_a_strategy_by_name():
    """encode_sample needs nothing packing-specific: the base class packs with the strategy."""
    with energon_plugins.isolated_registry(plugin):  # entry points too: the built-in strategies
        strategy = energon_plugins.create("packing_strategy", "first-fit-decreasing")
        ctx = energon_plugins.BuildContext(
            tokenizer=tiny_tokenizer(),
            image_processor=fake_processor,
            seq_length=16,
            packing=strategy,
            packing_buffer_size=4,
        )
        encoder = energon_plugins.create("task_encoder", "captions", {"image_tokens": 2}, ctx)
    encoded = [encoder.encode_sample(sample(c)) for c in ("a red cat", "a dog", "cat", "red")]
    groups = encoder.select_samples_to_pack(encoded)
    assert sorted(len(s.input_ids) for g in groups for s in g) == sorted(s.length for s in encoded)
    packed = [encoder.pack_selected_samples(g) for g in groups]
    assert all(p.length <= 16 for p in packed)
    batch = encoder.batch(packed)
    assert batch.packed_seq_params is not None  # THD layout for megatron-core
