"""What each kind of plugin must return, as predicates the loader and the author's kit share.

A plugin bug shows in its output: a packing strategy that places an index twice, an image
processor without ``pixel_values``, an ``encode_sample`` whose labels are shorter than its
tokens, a batch format that returns ``42``. The loader checks each output where it first
appears (cheap checks on every call, the costlier ones on the first call of each loader) and
stops at once with a :class:`~energon_plugins.errors.PluginOutputError` naming the plugin; the
plugin author's kit (:mod:`energon_plugins.testing`) runs the same predicates over many
generated cases and reports the rule broken.

Every predicate returns ``None`` (the output keeps the contract) or ``(rule, detail)``: the
rule's short name, as the kit's :class:`~energon_plugins.testing.ConformanceError` names it,
and what is wrong.

- :func:`selection_problem`: a packing strategy's groups (from
  :mod:`energon_plugins.encoding.packing.rules`, which imports no torch);
- :func:`image_output_problem`: an image processor's result;
- :func:`token_tensors_problem` and :func:`encoded_sample_problem`: a task encoder's tokens,
  labels and loss mask (one sample, or a batch of rows);
- :func:`format_output_problem`: a batch format's output.
"""

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from megatron.energon.errors import FatalSampleError

from energon_plugins.encoding.packing.rules import Problem, selection_problem
from energon_plugins.errors import PluginOutputError

__all__ = [
    "LOOP_TENSOR_KEYS",
    "FatalPluginOutputError",
    "Problem",
    "encoded_sample_problem",
    "format_output_problem",
    "image_output_problem",
    "output_field",
    "selection_problem",
    "token_tensors_problem",
]

#: Keys that training loops read as tensors: present in a batch format's output, they must be.
LOOP_TENSOR_KEYS = ("tokens", "input_ids", "labels", "loss_mask", "position_ids")

#: What a batch format may never return (besides the batch itself, unchanged): no mapping of
#: tensors, nor an object with fields.
_NOT_A_BATCH = (type(None), numbers.Number, str, bytes, bytearray, list, tuple, set, torch.Tensor, np.ndarray)


class FatalPluginOutputError(PluginOutputError, FatalSampleError):
    """A plugin's output broke its contract inside Energon's pipeline (a task encoder's
    sample, an image processor's result, a packing strategy's selection).

    Also Energon's ``FatalSampleError``, so Energon stops the loader at once instead of logging
    the failure and skipping the sample as bad data (a plugin bug fails every sample).
    """


# ------------------------------------------------------------------ image processors
def output_field(output: Any, key: str) -> Any:
    """``output[key]``, else the attribute ``key`` (as task encoders read a processor's
    result), else ``None``."""
    if output is None:
        return None
    try:
        return output[key]
    except (KeyError, TypeError, IndexError):
        return getattr(output, key, None)


def image_output_problem(output: Any, count: int, *, strict: bool = False, values: bool = True) -> Problem:
    """Whether an image processor's result for ``count`` images holds usable ``pixel_values``.

    Always (cheap): ``pixel_values`` is there and a tensor (rule ``pixel-values``); ``strict``
    also wants a mapping (rule ``callable``). With ``values``: floating-point values are finite,
    an ``image_grid_thw`` is ``(count, 3)`` and describes as many patches as ``pixel_values``
    has rows; without one there is a row per image at least (``strict``: exactly
    ``(count, C, H, W)``, and the values must be floating point).
    """
    if strict and not isinstance(output, Mapping):
        return "callable", f"returned {type(output).__qualname__}, not a mapping with pixel_values"
    pixels = output_field(output, "pixel_values")
    if pixels is None:
        keys = sorted(map(str, output)) if isinstance(output, Mapping) else None
        what = f"keys: {keys}" if keys is not None else f"a {type(output).__qualname__}"
        return "pixel-values", f"the result has no 'pixel_values' ({what})"
    if not isinstance(pixels, torch.Tensor):
        return "pixel-values", (
            f"pixel_values is {type(pixels).__qualname__}, not a tensor "
            "(return_tensors='pt' asks for torch tensors)"
        )
    if not values:
        return None
    if strict and not pixels.dtype.is_floating_point:
        return "pixel-values", f"pixel_values has dtype {pixels.dtype}, not floating point"
    if pixels.dtype.is_floating_point and not bool(torch.isfinite(pixels).all()):
        return "pixel-values", "pixel_values hold NaN or infinite values"
    grid = output_field(output, "image_grid_thw")
    if grid is not None:
        grid = torch.as_tensor(grid)
        if tuple(grid.shape) != (count, 3):
            return "pixel-values", (
                f"image_grid_thw has shape {tuple(grid.shape)} for {count} images; expected ({count}, 3)"
            )
        patches = int(grid.prod(dim=-1).sum())
        if pixels.dim() == 0 or pixels.shape[0] != patches:
            return "pixel-values", (
                f"pixel_values has shape {tuple(pixels.shape)}, but image_grid_thw describes {patches} patches"
            )
        return None
    if strict and (pixels.dim() != 4 or pixels.shape[0] != count):
        return "pixel-values", (
            f"pixel_values has shape {tuple(pixels.shape)} for {count} images; expected "
            f"({count}, C, H, W), or patches with image_grid_thw"
        )
    if pixels.dim() == 0 or pixels.shape[0] < count:
        return "pixel-values", f"pixel_values has shape {tuple(pixels.shape)} for {count} images"
    return None


# ------------------------------------------------------------------ task encoders
def token_tensors_problem(
    input_ids: Any, labels: Any, *, dims: int, others: Mapping[str, Any] | None = None
) -> Problem:
    """Whether ``input_ids`` and ``labels`` are ``dims``-D integer tensors of one shape (rules
    ``fields`` and ``shapes``), and each of ``others`` (e.g. ``loss_mask``) a tensor of that
    shape too."""
    layout = "(L,)" if dims == 1 else "(B, L)"
    for name, value in (("input_ids", input_ids), ("labels", labels)):
        if not isinstance(value, torch.Tensor):
            return "fields", f"{name} is {type(value).__name__}, expected a {layout} tensor"
        if value.dim() != dims or value.dtype.is_floating_point or value.dtype == torch.bool:
            return "fields", (
                f"{name} must be a {dims}-D integer tensor, got {tuple(value.shape)} {value.dtype}"
            )
    shape = tuple(input_ids.shape)
    for name, value in (("labels", labels), *(others or {}).items()):
        if not isinstance(value, torch.Tensor):
            return "fields", f"{name} is {type(value).__name__}, expected a {layout} tensor"
        if tuple(value.shape) != shape:
            return "shapes", f"{name} {tuple(value.shape)} and input_ids {shape} differ in shape"
    return None


def encoded_sample_problem(sample: Any, *, max_length: int | None = None) -> Problem:
    """Whether ``encode_sample``'s result is what ``batch`` and packing read: an
    :class:`~energon_plugins.EncodedSample` (or a subclass, or an object with its fields)
    whose ``input_ids``, ``labels`` and ``loss_mask`` are 1-D tensors of one non-zero length,
    at most ``max_length`` (rule ``sample-length``), ``seq_lengths`` (when set) summing to it
    and ``pixel_values`` a tensor or ``None`` (rules ``sample-type``, ``fields``,
    ``shapes``)."""
    if not all(hasattr(sample, name) for name in ("input_ids", "labels", "loss_mask")):
        return "sample-type", f"{type(sample).__name__}, not an EncodedSample (input_ids, labels, loss_mask)"
    problem = token_tensors_problem(
        sample.input_ids, sample.labels, dims=1, others={"loss_mask": sample.loss_mask}
    )
    if problem is not None:
        return problem
    length = int(sample.input_ids.shape[0])
    if length == 0:
        return "sample-length", "no tokens (input_ids is empty)"
    if max_length is not None and length > max_length:
        return "sample-length", f"{length} tokens, more than seq_length {max_length}"
    seq_lengths = getattr(sample, "seq_lengths", None)
    if seq_lengths is not None and sum(seq_lengths) != length:
        return "shapes", f"seq_lengths {list(seq_lengths)} sum to {sum(seq_lengths)}, not its {length} tokens"
    pixels = getattr(sample, "pixel_values", None)
    if pixels is not None and not isinstance(pixels, torch.Tensor):
        return "fields", f"pixel_values is {type(pixels).__name__}, expected a tensor or None"
    return None


# ------------------------------------------------------------------ batch formats
def format_output_problem(output: Any, batch: Any, tensor_keys: Sequence[str] = ()) -> Problem:
    """Whether a batch format's ``output`` for ``batch`` is what a training loop can read
    (rule ``format-output``): ``batch`` itself (passed through), or a mapping (or an object
    with fields) whose loop keys (:data:`LOOP_TENSOR_KEYS`) hold tensors where present, and
    which has every key of ``tensor_keys`` (what the format declares) as a tensor."""
    if output is batch:
        return None
    if isinstance(output, _NOT_A_BATCH):
        return "format-output", (
            f"returned {type(output).__name__}; expected a mapping of tensors (or the batch unchanged)"
        )
    read = _mapping_reader(output)
    for key in tensor_keys:
        value = read(key)
        if not isinstance(value, torch.Tensor):
            what = "no such key" if value is None else type(value).__name__
            return "format-output", f"declares {key!r} a tensor, but its output has {what} there"
    for key in LOOP_TENSOR_KEYS:
        value = read(key, _ABSENT)
        if value is not _ABSENT and not isinstance(value, torch.Tensor):
            return "format-output", (
                f"returned {key!r} as {type(value).__name__}; training loops read it as a tensor"
            )
    return None


_ABSENT = object()


def _mapping_reader(output: Any) -> Any:
    """``read(key, default=None)``: an item of a mapping, else an attribute of an object."""
    if isinstance(output, Mapping):
        return lambda key, default=None: output.get(key, default)
    return lambda key, default=None: getattr(output, key, default)
