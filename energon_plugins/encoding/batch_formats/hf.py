"""The ``hf`` batch format: keyword arguments of a transformers model's ``forward``.

``model(**batch)`` computes the loss itself: transformers' causal-LM loss shifts the labels
(``logits[:, :-1]`` against ``labels[:, 1:]``), so the labels here are *aligned* with
``input_ids`` and ``-100`` wherever the loss is off.

Packed batches follow transformers' packed-sequence path (what ``DataCollatorWithFlattening``
produces): no ``attention_mask``, ``position_ids`` restarting at 0 in every sub-sequence (from
which the flash-attention, SDPA and eager paths build per-sequence causal masks), the label of
each sub-sequence's first token set to ``-100`` so the shift never predicts across a boundary,
and ``use_cache=False``: transformers looks for packed sequences only without a KV cache, which
a model whose config enables the cache would otherwise create. Models that compute their own
multi-axis positions (Qwen2-VL's M-RoPE) do not take 1-D ``position_ids``: use them unpacked.
"""

from typing import Any

import torch

from energon_plugins.encoding.batch_formats.base import BatchFormat
from energon_plugins.encoding.batch_formats.labels import (
    aligned_targets,
    mask_starts,
    segment_starts,
)
from energon_plugins.encoding.samples import MultiModalBatch


class HFFormat(BatchFormat):
    """The ``forward`` keyword arguments of a transformers model (a plain dict).

    Keys: ``input_ids`` int64 ``(B, L)``; ``labels`` int64 ``(B, L)`` aligned, ``-100`` where
    the loss is off; unpacked ``attention_mask`` int64 ``(B, L)`` (1 on real tokens), packed
    ``position_ids`` int64 ``(B, L)`` and ``use_cache=False`` instead; ``pixel_values`` and
    ``image_grid_thw`` when the batch has them; every ``visual`` entry (``image_sizes``,
    ``pixel_attention_mask``, ...) and every ``token_fields`` entry (``token_type_ids``, ...) by
    its own keyword.
    """

    name = "hf"
    tensor_keys = ("input_ids", "labels")

    def format(self, batch: MultiModalBatch) -> dict[str, Any]:
        """The ``forward`` keyword arguments of ``batch``."""
        labels = aligned_targets(batch, self.ignore_index)
        out: dict[str, Any] = {"input_ids": batch.input_ids.to(torch.long)}
        if batch.packed_seq_params is not None:
            labels = mask_starts(labels, segment_starts(batch))
            out["position_ids"] = batch.position_ids.to(torch.long)
        elif batch.attention_mask is not None:
            out["attention_mask"] = batch.attention_mask.to(torch.long)
        out["labels"] = labels
        if batch.pixel_values is not None:
            out["pixel_values"] = batch.pixel_values
        if batch.image_grid_thw is not None:
            out["image_grid_thw"] = batch.image_grid_thw
        out.update(batch.visual or {})
        out.update(batch.token_fields or {})
        if batch.packed_seq_params is not None:
            out["use_cache"] = False
        return out


def build_hf_format(options: Any, context: Any) -> HFFormat:
    """Factory of the built-in ``hf`` format (``factory(options, context)``)."""
    return HFFormat(context, options)
