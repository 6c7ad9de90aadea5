"""``megatron-lm`` batches, read the way Megatron-LM's ``examples/multimodal`` trains on them.

Each batch of a real Energon dataset goes through the replayed ``get_batch`` (dtype checks of
``broadcast_data``, the text-only and packing dummies, the label shift, the loss mask) and then
through megatron-core's own ``LLaVAModel._preprocess_data`` (the installed code), which expands
every image token into the image's embeddings and places labels and loss mask on the combined
sequence. The combined sequence must be the task encoder's row again, and its supervised
positions exactly the next-token targets computed independently from the encoder's aligned
labels (a second datamodule with ``batch_format=None`` yields the same batches in order).
"""

import pytest
import torch

import energon_plugins
from energon_plugins.encoding.batch_formats.options import LLAVA_DEFAULT_IMAGE_TOKEN_INDEX
from energon_plugins.errors import BatchFormatError
from tests._loop_replay import (
    IGNORE,
    llava_preprocess,
    loop_datamodule,
    mlm_get_batch,
    reference_next_token,
)

SEQ = 128
IMAGE_TOKENS = 5


@pytest.fixture(scope="module")
def processor(small_clip_processor):
    return small_clip_processor


def make_dm(info, tokenizer, processor, *, image_tokens=IMAGE_TOKENS, **kwargs):
    kwargs.setdefault("batch_format", "megatron-lm")
    return loop_datamodule(
        info, tokenizer, processor, seq=SEQ, image_tokens=image_tokens, pad_to_multiple_of=4, **kwargs
    )


CASES = [("vqa", False, 3), ("vqa", True, 1), ("interleaved", True, 1), ("interleaved", False, 1)]


@pytest.mark.parametrize(
    ("dataset", "packing", "mbs"),
    CASES,
    ids=[f"{d}-{'packed' if p else 'unpacked'}-mbs{m}" for d, p, m in CASES],
)
def test_get_batch_and_llava_expansion_give_next_token_targets(
    request, tokenizer, processor, dataset, packing, mbs
):
    info = request.getfixturevalue(f"{dataset}_dataset")
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    loader = iter(make_dm(info, tokenizer, processor, packing=packing, mbs=mbs).train_dataloader())
    reference = iter(
        make_dm(info, tokenizer, processor, packing=packing, mbs=mbs, batch_format=None).train_dataloader()
    )
    for _ in range(3):
        data = next(loader)
        ref = next(reference)
        assert data["labels"].shape[1] == data["tokens"].shape[1] + 1, "one wider, unshifted"
        tokens, labels, loss_mask, _, imgs, num_tiles, packed = mlm_get_batch(
            data, pad_id=tokenizer.pad_token_id
        )
        images = int(ref.num_images.sum())
        assert int((tokens == image_id).sum()) == images, "one image token per image"
        assert imgs.shape == (images, 3, 28, 28) and num_tiles.tolist() == [1] * images
        if packing:
            assert packed is not None and packed.qkv_format == "thd"
            laid_out = ref.packed_seq_params.cu_seqlens_q_padded
            assert torch.equal(packed.cu_seqlens_q, laid_out), "offsets in the model's sequence"
            assert int(packed.max_seqlen_q) == int(laid_out.diff().max())
        else:
            assert packed is None
        ids, final_labels, final_mask = llava_preprocess(
            tokens, labels, loss_mask, num_tiles, image_token_index=image_id, img_seq_len=IMAGE_TOKENS
        )
        want = reference_next_token(ref)
        for row in range(ref.input_ids.shape[0]):
            real = (
                int(ref.attention_mask[row].sum())
                if ref.attention_mask is not None
                else ref.input_ids.shape[1]
            )
            expanded = ids[row, :real].clone()
            expanded[expanded == -1.0] = image_id
            assert torch.equal(expanded.long(), ref.input_ids[row, :real]), "same sequence"
            on = final_mask[row, :real].bool()
            target = want[row, :real]
            # LLaVAModel's own rule: no loss on image embeddings (the last one would predict
            # the text after the image); everywhere else exactly the encoder's targets
            expected = (target != IGNORE) & (ref.input_ids[row, :real] != image_id)
            assert bool(on.any())
            assert torch.equal(on, expected), "supervised exactly where the encoder said"
            assert torch.equal(final_labels[row, :real][on], target[on])
            assert not bool(final_mask[row, real:].any())


def test_text_only_batches_carry_the_dummy_image():
    """A batch without images has imgs [1, 1] and num_tiles [[0]], which get_batch empties."""
    from energon_plugins.encoding.samples import EncodedSample
    from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder

    encoder = PluginTaskEncoder(energon_plugins.BuildContext(seq_length=8))
    ids = torch.tensor([5, 6, 7, 8])
    sample = EncodedSample(
        __key__="t",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        input_ids=ids,
        labels=torch.tensor([-100, -100, 7, 8]),
        loss_mask=torch.tensor([0.0, 0.0, 1.0, 1.0]),
        seq_lengths=[4],
    )
    fmt = energon_plugins.create("batch_format", "megatron-lm", {"source_image_token_id": 3})
    data = fmt(encoder.batch([sample]))
    assert data["imgs"].shape == (1, 1) and data["imgs"].dtype == torch.float32
    assert data["num_tiles"].tolist() == [[0]] and data["num_tiles"].dtype == torch.int32
    assert data["cu_lengths"].tolist() == [[0]] and data["max_lengths"].tolist() == [[0]]
    tokens, labels, loss_mask, _, imgs, num_tiles, packed = mlm_get_batch(data, pad_id=0)
    assert imgs.numel() == 0 and num_tiles.numel() == 0 and packed is None
    assert labels[0, :4].tolist() == [-100, 7, 8, -100]
    assert loss_mask[0, :4].tolist() == [0.0, 1.0, 1.0, 0.0]


def test_image_token_id_option_writes_llavas_default_index(vqa_dataset, tokenizer, processor):
    """``image_token_id: -200`` writes LLaVAModel's default image_token_index, which it expands."""
    dm = make_dm(
        vqa_dataset,
        tokenizer,
        processor,
        packing=False,
        mbs=2,
        batch_format={"name": "megatron-lm", "options": {"image_token_id": LLAVA_DEFAULT_IMAGE_TOKEN_INDEX}},
    )
    ref = next(
        make_dm(vqa_dataset, tokenizer, processor, packing=False, mbs=2, batch_format=None).train_dataloader()
    )
    data = next(dm.train_dataloader())
    tokens, labels, loss_mask, _, imgs, num_tiles, _ = mlm_get_batch(data, pad_id=0)
    assert int((tokens == LLAVA_DEFAULT_IMAGE_TOKEN_INDEX).sum()) == 2
    ids, _, _ = llava_preprocess(
        tokens,
        labels,
        loss_mask,
        num_tiles,
        image_token_index=LLAVA_DEFAULT_IMAGE_TOKEN_INDEX,
        img_seq_len=IMAGE_TOKENS,
    )
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    for row in range(2):
        real = int(ref.attention_mask[row].sum())
        expanded = ids[row, :real].clone()
        expanded[expanded == -1.0] = image_id
        assert torch.equal(expanded.long(), ref.input_ids[row, :real])


def _patch_processor(images, return_tensors="pt"):
    """A Qwen-style processor: flattened patches (P, D) and a (t, h, w) grid per image."""
    n = len(images)
    return {"pixel_values": torch.rand(4 * n, 12), "image_grid_thw": torch.tensor([[1, 2, 2]] * n)}


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("patches", "batch format 'megatron-lm'.*patches.*task encoder MultimodalTaskEncoder"),
        ("packed-rows", "batch format 'megatron-lm'.*2 rows.*micro_batch_size 1"),
    ],
)
def test_batches_it_cannot_express_are_refused_by_name(vqa_dataset, tokenizer, processor, setup, words):
    if setup == "patches":
        dm = energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path),
            tokenizer,
            _patch_processor,
            seq_length=SEQ,
            num_workers=0,
            batch_format="megatron-lm",
            task_encoder={"name": "multimodal", "options": {"merge_size": 1}},
        )
    else:
        dm = make_dm(vqa_dataset, tokenizer, processor, packing=True, mbs=2)
    with pytest.raises(BatchFormatError, match=words):
        next(dm.train_dataloader())
