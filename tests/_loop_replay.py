"""The training loops' batch handling, replayed step by step on CPU, for the loop tests.

Written from the loops' code (not copied), at the revisions read for issue 14:

- Megatron-Bridge ``src/megatron/bridge/training/vlm_step.py`` (``get_batch_from_iterator``,
  ``get_batch``, ``forward_step``), ``training/utils/packed_seq_utils.py``
  (``get_packed_seq_params``) and ``training/losses.py`` (``masked_next_token_loss``);
- Megatron-LM ``examples/multimodal/train.py`` (``get_batch``, ``get_ltor_masks_and_position_ids``)
  and megatron-core's ``LLaVAModel._preprocess_data``, which is *called* (the installed one) on
  a stand-in ``self`` that holds only the attributes it reads.

"Moving to the GPU" is a move to ``device`` (the CPU here); everything else is the loops' logic.
Also: the independent reference the tests compare against, next-token targets computed from
the task encoder's own (aligned) batch, one sub-sequence at a time.
"""

import copy
import dataclasses
import types
from typing import Any

import torch
import torch.nn.functional as F

IGNORE = -100

# ----------------------------------------------------------------------------- Megatron-Bridge
BRIDGE_PACKED_DEVICE = (
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv_padded",
)
BRIDGE_PACKED_HOST = ("max_seqlen_q", "max_seqlen_kv")
BRIDGE_PACKED_PARAMS = (*BRIDGE_PACKED_DEVICE, *BRIDGE_PACKED_HOST, "total_tokens")


def bridge_get_batch_from_iterator(
    iterator, *, skip_attention_mask=True, first_pp=True, last_pp=True, device="cpu"
):
    """``get_batch_from_iterator``: keep the required keys, move them, set the rest to None."""
    batch = next(iterator)
    device_keys = {"visual_inputs", "tokens", "input_ids", "position_ids"}
    host_keys = set()
    if not skip_attention_mask:
        device_keys.add("attention_mask")
    if "cu_seqlens_q" in batch:
        device_keys.update(k for k in BRIDGE_PACKED_DEVICE if k in batch)
        host_keys.update(k for k in BRIDGE_PACKED_HOST if k in batch)
    if last_pp:
        device_keys.update(("labels", "loss_mask"))
    kept = {}
    for key, value in batch.items():
        if key in device_keys:
            if key == "visual_inputs":
                if value is None:
                    kept[key] = None
                    continue
                if not first_pp:  # middle stages keep metadata only
                    value = copy.copy(value)
                    for name in ("pixel_values", "pixel_values_videos"):
                        if hasattr(value, name):
                            setattr(value, name, None)
                for name, tensor in value.__dict__.items():
                    value.__dict__[name] = tensor.to(device) if tensor is not None else None
                kept[key] = value
            else:
                kept[key] = value.to(device) if value is not None else None
        elif key in host_keys:
            kept[key] = value.cpu() if value is not None else None
        else:
            kept[key] = None
    return kept


def bridge_get_batch(iterator, **kwargs):
    """``get_batch``: the 7-tuple ``forward_step`` unpacks."""
    batch = bridge_get_batch_from_iterator(iterator, **kwargs)
    tokens = batch.get("tokens") if batch.get("tokens") is not None else batch.get("input_ids")
    packed = (
        {k: batch[k] for k in BRIDGE_PACKED_PARAMS if batch.get(k) is not None}
        if batch.get("cu_seqlens_q") is not None
        else None
    )
    return (
        tokens,
        batch.get("labels"),
        batch.get("loss_mask"),
        batch.get("attention_mask"),
        batch.get("position_ids"),
        packed,
        batch.get("visual_inputs"),
    )


def _squeeze(value):
    return value.squeeze() if isinstance(value, torch.Tensor) else value


def _as_int(value):
    value = _squeeze(value)
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        assert value.numel() == 1, f"expected one value, got shape {tuple(value.shape)}"
        return int(value.item())
    return int(value)


def bridge_packed_seq_params(packed):
    """``get_packed_seq_params`` (current keys) into the installed megatron-core class.

    The installed megatron-core predates ``total_tokens`` (Bridge's head needs >= 0.18), so
    only the fields the class has are passed.
    """
    from megatron.core.packed_seq_params import PackedSeqParams

    cu_q = _squeeze(packed["cu_seqlens_q"])
    cu_kv = _squeeze(packed.get("cu_seqlens_kv"))
    max_q = _as_int(packed.get("max_seqlen_q"))
    max_kv = _as_int(packed.get("max_seqlen_kv"))
    values = dict(
        cu_seqlens_q=cu_q,
        cu_seqlens_kv=cu_kv if cu_kv is not None else cu_q,
        cu_seqlens_q_padded=_squeeze(packed.get("cu_seqlens_q_padded")),
        cu_seqlens_kv_padded=_squeeze(packed.get("cu_seqlens_kv_padded")),
        max_seqlen_q=max_q,
        max_seqlen_kv=max_kv if max_kv is not None else max_q,
        total_tokens=packed.get("total_tokens"),
        qkv_format="thd",
    )
    fields = {f.name for f in dataclasses.fields(PackedSeqParams)}
    return PackedSeqParams(**{k: v for k, v in values.items() if k in fields})


def bridge_forward_args(step):
    """``forward_step``'s ``forward_args`` from the ``get_batch`` tuple."""
    tokens, labels, loss_mask, attention_mask, position_ids, packed, visual = step
    args = {
        "input_ids": tokens,
        "position_ids": position_ids,
        "attention_mask": attention_mask,
        "labels": labels,
        "loss_mask": loss_mask,
    }
    if visual is not None:
        args.update(visual.normalized_for_model())
    if packed is not None:
        args["packed_seq_params"] = bridge_packed_seq_params(packed)
    return args


def megatron_token_losses(logits, labels):
    """Per-token cross-entropy as Megatron's vocab-parallel kernel computes it: a target outside
    the vocabulary (``-100``) contributes ``logsumexp`` (a real value), so only the loss mask
    keeps it out of the loss."""
    lse = torch.logsumexp(logits.float(), dim=-1)
    inside = (labels >= 0) & (labels < logits.shape[-1])
    picked = logits.float().gather(-1, labels.clamp(0, logits.shape[-1] - 1).unsqueeze(-1))
    return lse - picked.squeeze(-1) * inside


def bridge_masked_next_token_loss(loss_mask, token_losses):
    """``masked_next_token_loss``: ``(sum(losses * mask), num_tokens)``."""
    losses = token_losses.view(-1).float()
    mask = loss_mask.view(-1).float()
    return torch.sum(losses * mask), mask.sum().to(torch.int)


# ----------------------------------------------------------------------------- Megatron-LM
MLM_DTYPES = {
    "tokens": torch.int64,
    "labels": torch.int64,
    "imgs": torch.float32,
    "num_tiles": torch.int32,
    "cu_lengths": torch.int32,
    "max_lengths": torch.int32,
}


def mlm_get_batch(data, *, pad_id):
    """``get_batch`` (TP rank 0, no pipeline, no CP): dtype checks of ``broadcast_data``, the
    text-only dummy, the packing dummies, the label shift and the loss mask."""
    from megatron.core.packed_seq_params import PackedSeqParams
    from megatron.core.tensor_parallel.data import _check_data_types

    for key, dtype in MLM_DTYPES.items():
        _check_data_types([key], data, dtype)
    imgs, num_tiles = data["imgs"], data["num_tiles"]
    if imgs.shape == torch.Size([1, 1]):
        imgs = torch.tensor([], dtype=torch.float32)
        num_tiles = torch.tensor([], dtype=torch.int)
    cu_lengths, max_lengths = data["cu_lengths"], data["max_lengths"]
    packed = None
    if cu_lengths.shape != torch.Size([1, 1]):
        assert cu_lengths.shape[0] == max_lengths.shape[0] == 1, "micro-batch-size must be 1"
        packed = PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=cu_lengths[0],
            cu_seqlens_kv=cu_lengths[0],
            max_seqlen_q=max_lengths[0],
            max_seqlen_kv=max_lengths[0],
        )
    tokens_ = data["tokens"].long()
    text_length = tokens_.shape[1]
    tokens = tokens_[:, :text_length].contiguous()
    labels = data["labels"][:, 1 : text_length + 1].contiguous()
    assert tokens.shape == labels.shape, f"tokens: {tokens.shape} != labels: {labels.shape}"
    loss_mask = torch.ones(labels.size(), dtype=torch.float)
    loss_mask[labels == pad_id] = 0.0
    loss_mask[labels == IGNORE] = 0.0
    position_ids = torch.arange(text_length, dtype=torch.long).unsqueeze(0).expand_as(tokens)
    return tokens, labels, loss_mask, position_ids, imgs, num_tiles, packed


def llava_preprocess(
    tokens, labels, loss_mask, num_tiles, *, image_token_index, img_seq_len, image_value=-1.0
):
    """Megatron-core ``LLaVAModel._preprocess_data`` (installed), on a stand-in ``self``.

    Token embeddings are the token ids (hidden size 1) and image embeddings ``image_value``, so
    the combined sequence reads back as ids. Returns ``(ids, labels, loss_mask)`` of the combined
    sequence ``(B, S)``, image positions holding ``image_value``.
    """
    from megatron.core.models.multimodal.llava_model import LLaVAModel

    model = types.SimpleNamespace(
        add_decoder=True,
        pre_process=True,
        post_process=True,
        img_seq_len=img_seq_len,
        _language_is_pipeline_parallel=False,
        _language_max_sequence_length=1 << 20,
        context_parallel_lm=1,
        vision_model=None,
    )
    tiles = int(num_tiles.sum()) if num_tiles.numel() else 0
    # text only: LLaVAModel.forward runs no vision model and passes no embeddings
    image_embeddings = torch.full((img_seq_len, tiles, 1), image_value) if tiles else torch.empty(0, 0, 1)
    language_embeddings = tokens.float().unsqueeze(-1)
    embedding, final_labels, final_mask = LLaVAModel._preprocess_data(
        model,
        image_embeddings,
        language_embeddings,
        tokens,
        loss_mask,
        labels,
        False,
        None,
        image_token_index,
        num_tiles,
    )
    return embedding.transpose(0, 1)[..., 0], final_labels, final_mask


# ----------------------------------------------------------------------------- the reference
def segments_of(batch):
    """``[(row, start, end)]`` of every sub-sequence of the task encoder's own batch (position
    ids restart at 0 in every sub-sequence, and in a row's padding tail)."""
    out = []
    for row in range(batch.input_ids.shape[0]):
        starts = (batch.position_ids[row] == 0).nonzero().flatten().tolist()
        bounds = starts + [int(batch.input_ids.shape[1])]
        out += [(row, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return out


def reference_next_token(batch, ignore_index=IGNORE):
    """``(B, L)`` next-token targets from the encoder's aligned labels, per sub-sequence: the
    HF-style shift (``labels[1:]`` against positions ``[:-1]``) applied inside each one."""
    targets = torch.full_like(batch.labels, IGNORE)
    for row, a, b in segments_of(batch):
        shifted = batch.labels[row, a + 1 : b].clone()
        shifted[shifted == ignore_index] = IGNORE
        shifted[batch.loss_mask[row, a + 1 : b] == 0] = IGNORE
        targets[row, a : b - 1] = shifted
    return targets


def reference_loss(batch, logits_of, ignore_index=IGNORE):
    """``(sum, count)`` of the next-token cross-entropy over every sub-sequence of the encoder's
    batch; ``logits_of(row, start, end)`` gives the logits of those positions."""
    total, count = torch.tensor(0.0), 0
    for row, a, b in segments_of(batch):
        labels = batch.labels[row, a:b].clone()
        labels[labels == ignore_index] = IGNORE
        labels[batch.loss_mask[row, a:b] == 0] = IGNORE
        logits = logits_of(row, a, b)
        total = total + F.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=IGNORE, reduction="sum")
        count += int((labels[1:] != IGNORE).sum())
    return total, count


# ----------------------------------------------------------------------------- the loaders
def loop_datamodule(
    info,
    tokenizer,
    processor,
    *,
    seq: int = 128,
    mbs: int = 1,
    packing: bool = False,
    pad_to_multiple_of: int = 1,
    image_tokens: int | None = None,
    context: dict | None = None,
    **kwargs: Any,
):
    """A datamodule over ``info`` (0 workers) as the loop tests read it: optionally packing
    with first-fit-decreasing, and with ``image_tokens`` or ``context`` changes, its training
    encoder built from them (the built-in ``multimodal``)."""
    import energon_plugins
    from energon_plugins.encoding.task_encoders.multimodal import MultimodalTaskEncoder
    from energon_plugins.encoding.task_encoders.options import MultimodalOptions

    args = dict(seq_length=seq, micro_batch_size=mbs, num_workers=0, shuffle_buffer_size=10)
    if packing:
        args.update(
            packing_buffer_size=6,
            packing=energon_plugins.create(
                "packing_strategy", "first-fit-decreasing", {"pad_to_multiple_of": pad_to_multiple_of}
            ),
        )
    args.update(kwargs)
    dm = energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)
    if image_tokens is not None or context:
        dm.task_encoder = MultimodalTaskEncoder(
            dm.build_context("train").replace(**(context or {})), MultimodalOptions(image_tokens=image_tokens)
        )
    return dm
