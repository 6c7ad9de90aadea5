"""Where the loss is, where sub-sequences start, and labels moved to where a loop reads them.

A :class:`~energon_plugins.MultiModalBatch` carries *aligned* labels: ``labels[i]`` is the
target for token ``i`` itself (``input_ids[i]`` where the loss is on). The loops differ in
where they expect a target:

- next-token (Megatron models): the target at position ``i`` is the label of position
  ``i + 1`` (:func:`next_token`);
- aligned (Hugging Face models shift inside ``forward``): as is, with the first token of each
  packed sub-sequence masked so that the model's shift never crosses a boundary
  (:func:`mask_starts`).

Sub-sequence boundaries come from the batch's ``packed_seq_params`` (the laid-out cumulative
lengths over the flattened rows) or, unpacked, from the rows. No shifted target ever crosses
one.
"""

from typing import Any

import torch

#: The label value every loop's loss ignores (PyTorch's cross-entropy default).
IGNORE_INDEX = -100


def loss_on(batch: Any, ignore_index: int) -> torch.Tensor:
    """``(B, L)`` bool: where the loss counts (a label other than ``ignore_index`` and a
    positive ``loss_mask``)."""
    on = batch.labels != ignore_index
    if batch.loss_mask is not None:
        on &= batch.loss_mask > 0
    return on


def laid_out_offsets(batch: Any) -> torch.Tensor | None:
    """The cumulative sub-sequence offsets over the flattened ``(B * L)`` stream (packed
    batches; the ``*_padded`` offsets where set), or ``None`` for an unpacked batch.

    Raises:
        ValueError: the offsets do not cover exactly the flattened rows.
    """
    params = getattr(batch, "packed_seq_params", None)
    if params is None:
        return None
    offsets = params.cu_seqlens_q_padded
    if offsets is None:
        offsets = params.cu_seqlens_q
    offsets = torch.as_tensor(offsets).reshape(-1).to(torch.long)
    total = int(batch.input_ids.numel())
    if int(offsets[0]) != 0 or int(offsets[-1]) != total:
        raise ValueError(
            f"packed_seq_params offsets run from {int(offsets[0])} to {int(offsets[-1])}, but "
            f"the batch holds {total} tokens ({tuple(batch.input_ids.shape)})"
        )
    return offsets


def segment_starts(batch: Any) -> torch.Tensor:
    """``(B, L)`` bool: ``True`` at the first token of every sub-sequence (and of every row)."""
    rows, width = (int(n) for n in batch.input_ids.shape)
    starts = torch.zeros(rows * width, dtype=torch.bool)
    offsets = laid_out_offsets(batch)
    if offsets is not None:
        starts[offsets[:-1]] = True
    starts = starts.view(rows, width)
    starts[:, 0] = True
    return starts


def shift_left(values: torch.Tensor, starts: torch.Tensor, fill: Any) -> torch.Tensor:
    """``out[i] = values[i + 1]`` inside a sub-sequence, ``fill`` at its last position.

    ``starts`` is :func:`segment_starts`; the last column of every row gets ``fill`` too.
    """
    out = torch.full_like(values, fill)
    out[:, :-1] = values[:, 1:]
    last = torch.zeros_like(starts)
    last[:, :-1] = starts[:, 1:]
    last[:, -1] = True
    out[last] = fill
    return out


def aligned_targets(batch: Any, ignore_index: int) -> torch.Tensor:
    """``(B, L)`` int64: the batch's labels where the loss is on, :data:`IGNORE_INDEX` elsewhere."""
    on = loss_on(batch, ignore_index)
    return torch.where(on, batch.labels.to(torch.long), torch.full_like(batch.labels, IGNORE_INDEX,
                                                                         dtype=torch.long))


def next_token(batch: Any, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token ``(labels, loss_mask)``: position ``i`` gets the target of position ``i + 1``.

    ``labels`` is int64 with :data:`IGNORE_INDEX` where the loss is off, ``loss_mask`` float32
    (the batch's mask values moved the same way, 0 where the loss is off). Nothing crosses a
    sub-sequence boundary.
    """
    starts = segment_starts(batch)
    on = loss_on(batch, ignore_index)
    labels = shift_left(aligned_targets(batch, ignore_index), starts, IGNORE_INDEX)
    weights = batch.loss_mask.to(torch.float32) if batch.loss_mask is not None else on.float()
    mask = shift_left(torch.where(on, weights, torch.zeros_like(weights)), starts, 0.0)
    return labels, mask


def mask_starts(labels: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``labels`` with :data:`IGNORE_INDEX` at every sub-sequence start after a row's first
    token: a model that shifts internally then never predicts across a packed boundary."""
    out = labels.clone()
    inner = starts.clone()
    inner[:, 0] = False
    out[inner] = IGNORE_INDEX
    return out
