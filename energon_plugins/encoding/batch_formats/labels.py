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

import numpy as np
import torch

#: The label value every loop's loss ignores (PyTorch's cross-entropy default).
IGNORE_INDEX = -100

# The helpers compute in numpy on zero-copy views of the batch's CPU tensors (many small
# operations, each far cheaper in numpy than a torch call) and return torch tensors; the
# ``*_array`` variants return the numpy arrays, for formats that chain them.


def loss_on_array(batch: Any, ignore_index: int) -> np.ndarray:
    """:func:`loss_on` as a numpy array."""
    on = batch.labels.numpy() != ignore_index
    if batch.loss_mask is not None:
        on &= batch.loss_mask.numpy() > 0
    return on


def loss_on(batch: Any, ignore_index: int) -> torch.Tensor:
    """``(B, L)`` bool: where the loss counts (a label other than ``ignore_index`` and a
    positive ``loss_mask``)."""
    return torch.from_numpy(loss_on_array(batch, ignore_index))


def offsets_array(batch: Any) -> np.ndarray | None:
    """:func:`laid_out_offsets` as an int64 numpy array (``None`` unpacked)."""
    params = getattr(batch, "packed_seq_params", None)
    if params is None:
        return None
    offsets = params.cu_seqlens_q_padded
    if offsets is None:
        offsets = params.cu_seqlens_q
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
    total = int(batch.input_ids.numel())
    if offsets[0] != 0 or offsets[-1] != total:
        raise ValueError(
            f"packed_seq_params offsets run from {int(offsets[0])} to {int(offsets[-1])}, but "
            f"the batch holds {total} tokens ({tuple(batch.input_ids.shape)})"
        )
    return offsets


def laid_out_offsets(batch: Any) -> torch.Tensor | None:
    """The cumulative sub-sequence offsets over the flattened ``(B * L)`` stream (packed
    batches; the ``*_padded`` offsets where set), or ``None`` for an unpacked batch.

    Raises:
        ValueError: the offsets do not cover exactly the flattened rows.
    """
    offsets = offsets_array(batch)
    return None if offsets is None else torch.from_numpy(offsets)


def segment_starts_array(batch: Any) -> np.ndarray:
    """:func:`segment_starts` as a numpy array."""
    starts = np.zeros(tuple(batch.input_ids.shape), dtype=bool)
    offsets = offsets_array(batch)
    if offsets is not None:
        starts.reshape(-1)[offsets[:-1]] = True
    starts[:, 0] = True
    return starts


def segment_starts(batch: Any) -> torch.Tensor:
    """``(B, L)`` bool: ``True`` at the first token of every sub-sequence (and of every row)."""
    return torch.from_numpy(segment_starts_array(batch))


def shift_left_array(values: np.ndarray, starts: np.ndarray, fill: Any) -> np.ndarray:
    """:func:`shift_left` on numpy arrays."""
    out = np.full_like(values, fill)
    out[:, :-1] = values[:, 1:]
    last = np.ones_like(starts)
    last[:, :-1] = starts[:, 1:]
    out[last] = fill
    return out


def shift_left(values: torch.Tensor, starts: torch.Tensor, fill: Any) -> torch.Tensor:
    """``out[i] = values[i + 1]`` inside a sub-sequence, ``fill`` at its last position.

    ``starts`` is :func:`segment_starts`; the last column of every row gets ``fill`` too.
    """
    return torch.from_numpy(shift_left_array(values.numpy(), starts.numpy(), fill))


def aligned_targets_array(batch: Any, on: np.ndarray) -> np.ndarray:
    """:func:`aligned_targets` as a numpy array, given :func:`loss_on_array`."""
    return np.where(on, batch.labels.numpy().astype(np.int64, copy=False), IGNORE_INDEX)


def aligned_targets(batch: Any, ignore_index: int) -> torch.Tensor:
    """``(B, L)`` int64: the batch's labels where the loss is on, :data:`IGNORE_INDEX` elsewhere."""
    return torch.from_numpy(aligned_targets_array(batch, loss_on_array(batch, ignore_index)))


def next_token(batch: Any, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token ``(labels, loss_mask)``: position ``i`` gets the target of position ``i + 1``.

    ``labels`` is int64 with :data:`IGNORE_INDEX` where the loss is off, ``loss_mask`` float32
    (the batch's mask values moved the same way, 0 where the loss is off). Nothing crosses a
    sub-sequence boundary.
    """
    on = loss_on_array(batch, ignore_index)
    # position i takes what position i + 1 holds, unless i + 1 starts another sub-sequence
    on_next = on[:, 1:].copy()
    offsets = offsets_array(batch)
    if offsets is not None:
        width = on.shape[1]
        starts = offsets[:-1]
        inner = starts % width > 0  # a row's first token has no position before it
        on_next[starts[inner] // width, starts[inner] % width - 1] = False
    labels = np.full(on.shape, IGNORE_INDEX, dtype=np.int64)
    labels[:, :-1] = np.where(on_next, batch.labels.numpy()[:, 1:], IGNORE_INDEX)
    mask = np.zeros(on.shape, dtype=np.float32)
    weights = batch.loss_mask.numpy()[:, 1:] if batch.loss_mask is not None else 1.0
    mask[:, :-1] = np.where(on_next, weights, 0.0)
    return torch.from_numpy(labels), torch.from_numpy(mask)


def mask_starts(labels: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``labels`` with :data:`IGNORE_INDEX` at every sub-sequence start after a row's first
    token: a model that shifts internally then never predicts across a packed boundary."""
    out = labels.numpy().copy()
    inner = starts.numpy().copy()
    inner[:, 0] = False
    out[inner] = IGNORE_INDEX
    return torch.from_numpy(out)
