"""Filler batches: what a data-parallel rank that runs short of validation batches pads with.

A filler is a copy of a real batch that adds nothing to a loss: ``loss_mask`` all zero,
``labels`` all ``ignore_index``, and ``__key__`` / ``__keys__`` set to :data:`PADDING_KEY`.
:mod:`energon_plugins.loading.validation` decides when one is needed (and re-exports these
names).
"""

import copy
from collections.abc import Mapping, MutableMapping
from typing import Any

from energon_plugins.errors import ConfigError

PADDING_KEY = "__padding__"
"""The sample key filler batches carry in ``__key__`` (one per row)."""


def zero_loss_batch(batch: Any, ignore_index: int = -100) -> Any:
    """A copy of ``batch`` that contributes nothing to a loss: ``loss_mask`` all zero,
    ``labels`` all ``ignore_index``, and ``__key__`` / ``__keys__`` set to
    :data:`PADDING_KEY` per row.

    Works on attribute batches (``MultiModalBatch``) and on mappings (the batch formats).

    Raises:
        ConfigError: the batch has neither a ``loss_mask`` nor a ``labels`` tensor, so a
            filler cannot be made from it.
    """
    import torch

    filler = copy.deepcopy(batch)
    is_mapping = isinstance(filler, MutableMapping)

    def get(name: str) -> Any:
        return filler.get(name) if is_mapping else getattr(filler, name, None)

    def put(name: str, value: Any) -> None:
        if is_mapping:
            filler[name] = value
        else:
            setattr(filler, name, value)

    zeroed = False
    loss_mask = get("loss_mask")
    if isinstance(loss_mask, torch.Tensor):
        put("loss_mask", torch.zeros_like(loss_mask))
        zeroed = True
    labels = get("labels")
    if isinstance(labels, torch.Tensor):
        put("labels", torch.full_like(labels, ignore_index))
        zeroed = True
    if not zeroed:
        raise ConfigError(
            f"validation padding: a {type(batch).__name__} batch has no loss_mask or labels "
            "tensor, so no zero-loss filler batch can be made to even out the data-parallel "
            "ranks; set val_batches_per_evaluation to a number every rank reaches, or return "
            "batches with loss_mask / labels"
        )
    for name in ("__key__", "__keys__"):
        keys = get(name)
        if isinstance(keys, (list, tuple)):
            put(name, [PADDING_KEY] * len(keys))
        elif isinstance(keys, str):
            put(name, PADDING_KEY)
    return filler


def can_zero_mask(batch: Any) -> bool:
    """Whether :func:`zero_loss_batch` can make a filler from ``batch`` (it has a
    ``loss_mask`` or ``labels`` tensor, as an attribute or a mapping entry)."""
    import torch

    is_mapping = isinstance(batch, Mapping)
    for name in ("loss_mask", "labels"):
        value = batch.get(name) if is_mapping else getattr(batch, name, None)
        if isinstance(value, torch.Tensor):
            return True
    return False


def is_padding_batch(batch: Any) -> bool:
    """Whether ``batch`` is a filler made by :func:`zero_loss_batch`."""
    keys = (
        batch.get("__key__", batch.get("__keys__"))
        if isinstance(batch, Mapping)
        else (getattr(batch, "__key__", None))
    )
    if isinstance(keys, str):
        return keys == PADDING_KEY
    if not keys:
        return False
    return all(key == PADDING_KEY for key in keys)
