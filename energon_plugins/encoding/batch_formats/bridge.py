"""The ``megatron-bridge`` batch format: what Megatron-Bridge's ``vlm_step`` reads.

``get_batch_from_iterator`` takes a mapping and keeps, by key: ``tokens`` / ``input_ids``,
``position_ids``, ``labels`` and ``loss_mask`` (last pipeline stage), ``attention_mask`` (only
when ``skip_getting_attention_mask_from_dataset`` is off), ``visual_inputs`` (tensors moved to
the GPU through its ``__dict__``) and, for packed batches, the flat keys that
``get_packed_seq_params`` turns into megatron-core ``PackedSeqParams``. Every other key becomes
``None``. Megatron models do not shift labels: ``labels[i]`` is the target of position ``i``,
the token at ``i + 1``; the masked next-token loss is ``sum(per_token_loss * loss_mask) /
sum(loss_mask)``.
"""

from typing import Any

import numpy as np
import torch

from energon_plugins.encoding.batch_formats.base import BatchFormat, flat, row_keys
from energon_plugins.encoding.batch_formats.labels import next_token
from energon_plugins.encoding.batch_formats.sources import row_sources
from energon_plugins.encoding.batch_formats.visual_inputs import VisualInputs
from energon_plugins.encoding.samples import MultiModalBatch

#: The flat packed-sequence keys of a THD batch (Bridge's ``_PACKED_SEQ_PARAM_KEYS``).
PACKED_KEYS = (
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv_padded",
    "max_seqlen_q",
    "max_seqlen_kv",
    "total_tokens",
)


class BridgeBatch(dict):
    """The ``megatron-bridge`` batch: a plain mapping (what Bridge iterates with ``items()``)
    whose keys can also be read as attributes (``batch.labels``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no key {name!r} (keys: {', '.join(self)})"
            ) from None


class MegatronBridgeFormat(BatchFormat):
    """The mapping Megatron-Bridge's ``vlm_step`` reads (see the module docstring).

    Keys (``B`` rows of width ``L``; a packed batch is one THD stream ``(1, B * L)``):

    - ``tokens``, ``input_ids``: int64, the same tensor;
    - ``labels``: int64 next-token targets, ``-100`` where the loss is off;
    - ``loss_mask``: float32, the encoder's mask moved with the labels;
    - ``position_ids``: int64, restarting in every packed sub-sequence;
    - ``attention_mask``: int64 ``(B, L)`` padding mask (1 on real tokens), ``None`` when packed;
    - ``visual_inputs``: :class:`VisualInputs` with ``pixel_values``, ``image_grid_thw``,
      every ``visual`` entry and every ``token_fields`` entry (flattened like the tokens
      when packed);
    - packed only: ``cu_seqlens_q`` / ``cu_seqlens_kv`` (int32 ``(n + 1,)``, real lengths),
      ``cu_seqlens_q_padded`` / ``cu_seqlens_kv_padded`` (int32, as laid out; only when
      sub-sequences are padded), ``max_seqlen_q`` / ``max_seqlen_kv`` (int32 scalars) and
      ``total_tokens`` (int);
    - ``__keys__``: the ``__key__`` of every row (a packed row's keys joined by commas);
    - ``__sources__``: the source of every row, beside ``__keys__`` (a packed row's sources
      joined by commas; see :mod:`~energon_plugins.encoding.batch_formats.sources`).
    """

    name = "megatron-bridge"
    tensor_keys = ("tokens", "input_ids", "labels", "loss_mask", "position_ids")

    def format(self, batch: MultiModalBatch) -> BridgeBatch:
        """The Bridge mapping of ``batch``."""
        labels, loss_mask = next_token(batch, self.ignore_index)
        tokens = batch.input_ids.to(torch.long)
        position_ids = batch.position_ids.to(torch.long)
        token_fields = dict(batch.token_fields or {})
        params = batch.packed_seq_params
        packed = params is not None
        if packed:
            tokens, labels, loss_mask, position_ids = (
                flat(t) for t in (tokens, labels, loss_mask, position_ids)
            )
            token_fields = {key: flat(value) for key, value in token_fields.items()}
        attention_mask = None
        if not packed and batch.attention_mask is not None:
            attention_mask = batch.attention_mask.to(torch.long)
        visual = VisualInputs(
            pixel_values=batch.pixel_values,
            image_grid_thw=batch.image_grid_thw,
            **(batch.visual or {}),
            **token_fields,
        )
        out = BridgeBatch(
            tokens=tokens,
            input_ids=tokens,
            labels=labels,
            loss_mask=loss_mask,
            position_ids=position_ids,
            attention_mask=attention_mask,
            visual_inputs=visual,
        )
        if packed:
            out.update(packed_keys(params, total_tokens=int(tokens.shape[1])))
        out["__keys__"] = row_keys(batch)
        out["__sources__"] = row_sources(batch)
        return out


def packed_keys(params: Any, *, total_tokens: int) -> dict[str, Any]:
    """Bridge's flat packed-sequence keys from megatron-core ``PackedSeqParams``."""

    def offsets(value: Any) -> torch.Tensor:
        return torch.from_numpy(np.asarray(value, dtype=np.int32).reshape(-1))

    cu_q = offsets(params.cu_seqlens_q)
    keys: dict[str, Any] = {
        "cu_seqlens_q": cu_q,
        "cu_seqlens_kv": cu_q if params.cu_seqlens_kv is None else offsets(params.cu_seqlens_kv),
    }
    if params.cu_seqlens_q_padded is not None:
        padded = offsets(params.cu_seqlens_q_padded)
        keys["cu_seqlens_q_padded"] = padded
        kv = params.cu_seqlens_kv_padded
        keys["cu_seqlens_kv_padded"] = padded if kv is None else offsets(kv)
    max_kv = params.max_seqlen_kv if params.max_seqlen_kv is not None else params.max_seqlen_q
    keys["max_seqlen_q"] = torch.tensor(int(params.max_seqlen_q), dtype=torch.int32)
    keys["max_seqlen_kv"] = torch.tensor(int(max_kv), dtype=torch.int32)
    keys["total_tokens"] = total_tokens
    return keys


def build_megatron_bridge_format(options: Any, context: Any) -> MegatronBridgeFormat:
    """Factory of the built-in ``megatron-bridge`` format (``factory(options, context)``)."""
    return MegatronBridgeFormat(context, options)
