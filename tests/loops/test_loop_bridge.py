"""The default ``megatron-bridge`` batches, read the way Megatron-Bridge's ``vlm_step`` reads them.

Each batch of a real Energon dataset goes through the replayed ``get_batch_from_iterator`` /
``get_batch`` / ``forward_step`` (:mod:`tests._loop_replay`): the keys kept and moved, the
``visual_inputs`` tensors moved through ``__dict__``, ``normalized_for_model()``, the flat packed
keys turned into megatron-core ``PackedSeqParams``. Then the masked next-token loss Bridge
computes (per-token losses as Megatron's kernel gives them, times ``loss_mask``) must equal the
cross-entropy computed independently from the task encoder's own *aligned* labels, one
sub-sequence at a time, over the same tokens (read from a second datamodule with
``batch_format=None``, which yields the same batches in the same order).
"""

import math
import types

import pytest
import torch

import energon_plugins
from energon_plugins.encoding.packing.parallel import parallel_pad_multiple
from energon_plugins.errors import PluginConflictError
from tests._loop_replay import (
    bridge_forward_args,
    bridge_get_batch,
    bridge_get_batch_from_iterator,
    bridge_masked_next_token_loss,
    loop_datamodule,
    megatron_token_losses,
    reference_loss,
)

SEQ = 128
IMAGE_TOKENS = 4


@pytest.fixture(scope="module")
def processor(small_clip_processor):
    return small_clip_processor


def make_dm(info, tokenizer, processor, **kwargs):
    return loop_datamodule(info, tokenizer, processor, seq=SEQ, image_tokens=IMAGE_TOKENS, **kwargs)


def logits_table(vocab, seed=0):
    """A stand-in language model: position i's logits depend on token i only, so the loss
    tells a target placed one position off from the right one."""
    return torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed))


def table_logits(table, ref):
    """``logits_of(row, start, end)`` of the stand-in model over the encoder's own tokens."""
    return lambda row, start, end: table[ref.input_ids[row, start:end]]


CASES = [
    ("vqa", False, 2),
    ("vqa", True, 1),
    ("vqa", True, 2),
    ("interleaved", True, 1),
]


@pytest.mark.parametrize(
    ("dataset", "packing", "mbs"),
    CASES,
    ids=[f"{d}-{'packed' if p else 'unpacked'}-mbs{m}" for d, p, m in CASES],
)
def test_vlm_step_reads_the_batch_and_its_loss_is_next_token(
    request, tokenizer, processor, dataset, packing, mbs
):
    info = request.getfixturevalue(f"{dataset}_dataset")
    bridge = iter(make_dm(info, tokenizer, processor, packing=packing, mbs=mbs).train_dataloader())
    reference = iter(
        make_dm(info, tokenizer, processor, packing=packing, mbs=mbs, batch_format=None).train_dataloader()
    )
    table = logits_table(len(tokenizer))
    for _ in range(3):
        step = bridge_get_batch(bridge)
        ref = next(reference)
        tokens, labels, loss_mask, attention_mask, position_ids, packed, visual = step
        assert attention_mask is None  # skip_getting_attention_mask_from_dataset (default)
        assert tokens.dtype == labels.dtype == position_ids.dtype == torch.int64
        assert loss_mask.dtype == torch.float32
        assert tokens.shape == labels.shape == loss_mask.shape == position_ids.shape
        args = bridge_forward_args(step)
        assert torch.equal(args["pixel_values"], ref.pixel_values)
        if packing:
            # THD: one stream, and the packed keys become PackedSeqParams over all of it
            assert tokens.shape == (1, ref.input_ids.numel())
            assert torch.equal(tokens[0], ref.input_ids.reshape(-1))
            params = args["packed_seq_params"]
            assert params.qkv_format == "thd"
            assert torch.equal(params.cu_seqlens_q, ref.packed_seq_params.cu_seqlens_q)
            assert params.max_seqlen_q == ref.packed_seq_params.max_seqlen_q
            assert int(params.cu_seqlens_q[-1]) == tokens.shape[1]
            assert len(params.cu_seqlens_q) > 2, "rows hold several samples"
        else:
            assert packed is None and "packed_seq_params" not in args
            assert torch.equal(tokens, ref.input_ids)
        loss_sum, num_tokens = bridge_masked_next_token_loss(
            loss_mask, megatron_token_losses(table[tokens], labels)
        )
        want_sum, want_count = reference_loss(ref, table_logits(table, ref))
        assert int(num_tokens) == want_count > 0
        assert torch.allclose(loss_sum, want_sum, rtol=1e-5), (float(loss_sum), float(want_sum))


def test_attention_mask_and_pipeline_stages(vqa_dataset, tokenizer, processor):
    """With the dataset's attention mask requested, it is the padding mask; a middle pipeline
    stage keeps the image grid metadata and drops the pixels, on its own copy."""
    loader = make_dm(vqa_dataset, tokenizer, processor, packing=False, mbs=2).train_dataloader()
    ref = next(
        make_dm(vqa_dataset, tokenizer, processor, packing=False, mbs=2, batch_format=None).train_dataloader()
    )
    step = bridge_get_batch(loader, skip_attention_mask=False)
    attention_mask = step[3]
    assert torch.equal(attention_mask.bool(), ref.attention_mask)
    batch = next(loader)
    visual = batch["visual_inputs"]
    middle = bridge_get_batch_from_iterator(iter([batch]), first_pp=False, last_pp=False)
    assert middle["labels"] is None and middle["loss_mask"] is None
    assert middle["visual_inputs"].pixel_values is None
    assert visual.pixel_values is not None, "the loader's batch is not changed"
    assert set(middle["visual_inputs"].__dict__) == set(visual.__dict__)


@pytest.mark.parametrize(
    ("cp", "tp", "sp", "multiple"),
    [
        (1, 1, False, 1),
        (1, 4, False, 1),
        (1, 4, True, 4),
        (2, 1, False, 4),
        (2, 2, True, 4),
        (2, 4, True, 8),
        (4, 2, True, 8),
        (3, 2, True, 6),
        (2, 4, None, 8),
    ],
)
def test_parallel_pad_multiple(cp, tp, sp, multiple):
    """Megatron-Bridge's rule: lcm(2*CP if CP > 1, CP*TP with sequence parallel and TP > 1)."""
    assert parallel_pad_multiple(cp, tp, sp) == multiple


def test_context_parallel_pads_every_sub_sequence(vqa_dataset, tokenizer, processor):
    """CP 2 x TP 4 with sequence parallel: each packed sub-sequence is padded to a multiple of
    lcm(4, 8) = 8, reflected in cu_seqlens_*_padded; the loss is unchanged by the padding."""
    context = {"cp_size": 2, "tp_size": 4, "sequence_parallel": True}
    bridge = iter(
        make_dm(vqa_dataset, tokenizer, processor, packing=True, mbs=1, context=context).train_dataloader()
    )
    reference = iter(
        make_dm(
            vqa_dataset, tokenizer, processor, packing=True, mbs=1, context=context, batch_format=None
        ).train_dataloader()
    )
    table = logits_table(len(tokenizer), seed=1)
    for _ in range(3):
        step = bridge_get_batch(bridge)
        ref = next(reference)
        params = bridge_forward_args(step)["packed_seq_params"]
        padded, real = params.cu_seqlens_q_padded, params.cu_seqlens_q
        assert padded is not None and torch.equal(params.cu_seqlens_kv_padded, padded)
        widths, lengths = padded.diff(), real.diff()
        assert bool((widths % 8 == 0).all()), widths
        assert bool((lengths <= widths).all()) and bool((lengths < widths).any())
        assert int(padded[-1]) == step[0].shape[1] == SEQ
        assert params.max_seqlen_q == int(widths.max())
        tokens, labels, loss_mask = step[0], step[1], step[2]
        loss_sum, num = bridge_masked_next_token_loss(loss_mask, megatron_token_losses(table[tokens], labels))
        want_sum, want_count = reference_loss(ref, table_logits(table, ref))
        assert int(num) == want_count and torch.allclose(loss_sum, want_sum, rtol=1e-5)


def test_build_context_reads_cp_and_tp_from_pg_collection(vqa_dataset, tokenizer, processor):
    """``cp.size()`` and ``tp.size()`` of the process groups reach every factory's context."""
    group = types.SimpleNamespace  # what megatron-core's groups answer: rank() and size()
    pgs = types.SimpleNamespace(
        cp=group(rank=lambda: 0, size=lambda: 2), tp=group(rank=lambda: 0, size=lambda: 4)
    )
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path), tokenizer, processor, seq_length=SEQ, num_workers=0, pg_collection=pgs
    )
    context = dm.build_context()
    assert (context.cp_size, context.tp_size, context.sequence_parallel) == (2, 4, None)
    assert parallel_pad_multiple(context.cp_size, context.tp_size, context.sequence_parallel) == math.lcm(
        4, 8
    )


class _SameName:
    """A plugin that registers a batch format under the built-in's plain name."""

    @energon_plugins.hookimpl
    def register_batch_formats(self, register):
        register("megatron-bridge", lambda options, context: lambda batch: {"theirs": batch.input_ids})


def test_the_default_is_the_builtin_even_when_a_plugin_takes_its_name(vqa_dataset, tokenizer, processor):
    with energon_plugins.isolated_registry(_SameName(), distribution="energon-plugin-other"):
        dm = energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path), tokenizer, processor, seq_length=SEQ, num_workers=0
        )
        batch = next(dm.train_dataloader())
        assert batch["tokens"].shape[1] == SEQ and "visual_inputs" in batch
        with pytest.raises(PluginConflictError, match="energon-plugin-other:megatron-bridge"):
            energon_plugins.EnergonMultiModalDataModule(
                str(vqa_dataset.path), tokenizer, processor, num_workers=0, batch_format="megatron-bridge"
            )
        theirs = energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path),
            tokenizer,
            processor,
            seq_length=SEQ,
            num_workers=0,
            batch_format="energon-plugin-other:megatron-bridge",
        )
        assert set(next(theirs.train_dataloader())) == {"theirs"}
