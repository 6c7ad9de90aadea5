"""The processor the ``hf-processor`` encoder calls: the model's own, with its per-call costs cut.

The encoder calls the processor once per sample (each sample's length is known before packing),
where a per-batch loop calls it once per batch; what a call costs besides its sample's work is
paid per sample. :func:`calling_processor` returns a shallow copy of the processor (tokenizer,
video processor and settings shared) with:

- a faster image processor that gives the same pixels, bit for bit (:mod:`.fast_images`);
- its keyword-argument merge remembered: ``ProcessorMixin._merge_kwargs`` validates every
  modality's typed keyword arguments on every call (huggingface_hub's strict dataclasses,
  10-30% of a small sample's call), although the encoder passes the same ones each time. The
  merge of keyword arguments already seen is a deep copy of the first result (callers pop
  from it); arguments that are not plain values (str, numbers, None, lists, dicts) are merged
  afresh.
"""

from __future__ import annotations

import copy
from typing import Any

from energon_plugin_hf_processor.fast_images import fast_image_processor

PLAIN = (str, int, float, bool, type(None))
MAX_REMEMBERED = 64
"""Distinct keyword-argument sets remembered per processor (the encoder uses a few)."""


def calling_processor(processor: Any) -> Any:
    """A shallow copy of ``processor`` with a faster image processor (where there is one that
    gives the same pixels) and its keyword-argument merge remembered; the same outputs."""
    fast = copy.copy(processor)
    image_processor = fast_image_processor(getattr(processor, "image_processor", None))
    if image_processor is not None:
        fast.image_processor = image_processor
    merge = getattr(processor, "_merge_kwargs", None)
    if merge is not None:
        fast._merge_kwargs = RememberedMerge(
            merge, getattr(getattr(processor, "tokenizer", None), "init_kwargs", None)
        )
    return fast


class RememberedMerge:
    """``processor._merge_kwargs`` with its results remembered by their plain arguments.

    Args:
        merge: the processor's bound ``_merge_kwargs``.
        tokenizer_init_kwargs: the tokenizer's ``init_kwargs`` (the one non-plain argument the
            processor passes; a call with any other is merged afresh).
    """

    def __init__(self, merge: Any, tokenizer_init_kwargs: Any) -> None:
        self.merge = merge
        self.tokenizer_init_kwargs = tokenizer_init_kwargs
        self.results: dict[tuple[Any, ...], dict[str, dict]] = {}

    def __call__(self, *args: Any, tokenizer_init_kwargs: Any = None, **kwargs: Any) -> dict[str, dict]:
        """The merged keyword arguments, a fresh copy (callers change them)."""
        key = self._key(args, tokenizer_init_kwargs, kwargs)
        if key is None:
            return self.merge(*args, tokenizer_init_kwargs=tokenizer_init_kwargs, **kwargs)
        result = self.results.get(key)
        if result is None:
            result = self.merge(*args, tokenizer_init_kwargs=tokenizer_init_kwargs, **kwargs)
            if len(self.results) < MAX_REMEMBERED:
                self.results[key] = _fresh_copy(result)
            return result
        return _fresh_copy(result)

    def _key(self, args: tuple[Any, ...], init_kwargs: Any, kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        if init_kwargs is not None and init_kwargs is not self.tokenizer_init_kwargs:
            return None
        if not all(isinstance(arg, type) for arg in args) or not _plain(kwargs):
            return None
        return (args, init_kwargs is None, repr(sorted(kwargs.items())))


def _fresh_copy(value: Any) -> Any:
    """A deep copy of ``value``: of its dicts and lists only where it is plain (what
    ``_merge_kwargs`` returns: five times faster than ``copy.deepcopy``), else ``deepcopy``."""
    return _plain_copy(value) if _plain(value) else copy.deepcopy(value)


def _plain_copy(value: Any) -> Any:
    if type(value) is dict:
        return {key: _plain_copy(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_plain_copy(item) for item in value)
    return value  # str, numbers, None: immutable


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of str, numbers, None, lists, tuples and str-keyed dicts (of
    exactly those container types: a subclass may mean more than its items)."""
    if isinstance(value, PLAIN):
        return True
    if type(value) in (list, tuple):
        return all(_plain(item) for item in value)
    if type(value) is dict:
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def int_lists_as_tensors(out: dict[str, Any], skip: Any = None) -> dict[str, Any]:
    """``out`` with its lists of Python ints (token ids, masks, offsets) as int64 tensors, the
    tensors ``BatchFeature(out, tensor_type="pt")`` makes of them, through numpy (3-6x faster
    than ``torch.tensor`` on a list: 1-2 ms a 1,400-token sample). Any other value (floats,
    ragged lists, the keys in ``skip``) is left for ``BatchFeature``."""
    import numpy as np
    import torch

    converted = dict(out)
    for key, value in out.items():
        if not isinstance(value, list) or (skip and key in skip):
            continue
        try:
            array = np.array(value)
        except ValueError:  # ragged
            continue
        if array.dtype == np.int64 and array.size:
            converted[key] = torch.from_numpy(array)
    return converted
