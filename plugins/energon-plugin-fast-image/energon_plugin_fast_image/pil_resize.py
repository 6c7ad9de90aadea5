"""PIL's convolution resize (bicubic, bilinear) as banded matrix products in torch.

Pillow resizes in two separable 8-bit passes. For each output pixel it centres the filter
(bicubic with a = -0.5, or the triangle for bilinear) at ``(o + 0.5) * scale``, widens its
support by the scale when downscaling, normalises the taps to sum to one and quantises them to
22-bit fixed point (rounding half away from zero). Each pass adds half a unit, shifts the sum
right by 22 bits (floor) and clips to 0-255, so the first pass's result is a uint8 image.
Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many
pixels as the width (``out_h < in_h and in_h - out_h > 2 * (in_w - out_w)``), else the
horizontal pass first. This module reproduces all of that from that description (no code of
Pillow's), verified bit for bit against ``PIL.Image.resize`` in the tests.

Each pass is one matrix product over the whole group of same-size images (``M`` = every other
axis of the batch together). The pass over the outermost axis (rows, laid out ``(H, M)``) is a
sparse CSR ``(out, H)`` weight matrix times the input. The pass over the innermost axis
(columns) is a block-banded ``bmm``: the output pixels are grouped in blocks of ``BLOCK``; a
block reads one window of ``R`` input pixels, and the windows start at a uniform stride, so they
are a strided view of the (zero-padded) input, not a copy. Only the outputs that survive a later
center crop are computed.

Precision: in float64 the sums of integer pixels times integer weights are exact (below
2**53), so the result equals Pillow's bit for bit. In float32 (the processors' default, about
2.5x faster) a sum that lands within float32's rounding error of a .5 tie can round the other
way: a rare pixel is one level off (measured: about 2 in 100,000 for bicubic).
"""

import dataclasses
import functools
import math
import warnings

import numpy as np
import torch

PRECISION_BITS = 22
"""Pillow's fixed-point precision for 8-bit resampling (32 - 8 - 2)."""

BLOCK = 16
"""Output pixels per block of the banded product (measured fastest of 4-32 on CLIP sizes)."""

_SUPPORT = {"bicubic": 2.0, "bilinear": 1.0}


def _filter(name: str, x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    if name == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


@functools.lru_cache(maxsize=512)
def fixed_point_taps(in_size: int, out_size: int, mode: str = "bicubic") -> tuple[np.ndarray, np.ndarray]:
    """Pillow's taps for resizing one axis: ``(starts, weights)``.

    ``starts[o]`` is the first input pixel of output ``o``; ``weights[o, k]`` the integer
    fixed-point (22-bit) weight of input ``starts[o] + k`` (zero past the window).
    """
    support_base = _SUPPORT[mode]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = support_base * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    centers = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    # int() truncates toward zero, as the C cast does (values are >= -support here).
    lo = np.maximum(np.trunc(centers - support + 0.5), 0).astype(np.int64)
    hi = np.minimum(np.trunc(centers + support + 0.5), in_size).astype(np.int64)
    k = np.arange(ksize)
    inside = k[None, :] < (hi - lo)[:, None]
    taps = _filter(mode, (lo[:, None] + k[None, :] - centers[:, None] + 0.5) / filterscale)
    taps = np.where(inside, taps, 0.0)
    total = taps.sum(axis=1, keepdims=True)
    taps = np.divide(taps, total, out=taps.copy(), where=total != 0.0)
    scaled = taps * (1 << PRECISION_BITS)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5))
    return lo, fixed


@dataclasses.dataclass(frozen=True, eq=False)
class AxisPlan:
    """One axis' resize as a block-banded product over uniformly strided input windows.

    Output ``first + b * BLOCK + j`` reads the window of ``window`` input pixels starting at
    padded position ``offset + b * stride`` (the input is zero-padded by ``pad_lo`` before and
    ``pad_hi`` after); ``weights[b, j]`` are its taps over that window in units of 2**-22.
    """

    count: int
    blocks: int
    stride: int
    offset: int
    window: int
    pad_lo: int
    pad_hi: int
    weights: np.ndarray  # (blocks, BLOCK, window), float64 integers


@functools.lru_cache(maxsize=512)
def axis_plan(in_size: int, out_size: int, first: int, count: int, mode: str = "bicubic") -> AxisPlan:
    """Plan outputs ``first .. first + count - 1`` of an ``in_size -> out_size`` resize."""
    starts, fixed = fixed_point_taps(in_size, out_size, mode)
    starts, fixed = starts[first : first + count], fixed[first : first + count]
    ksize = fixed.shape[1]
    blocks = -(-count // BLOCK)
    nonzero = np.where(fixed.any(axis=0))[0]
    ends = starts + (nonzero[-1] + 1 if len(nonzero) else 1)
    stride = max(1, int(round(BLOCK * in_size / out_size)))
    lo = np.array([starts[b * BLOCK : (b + 1) * BLOCK].min() for b in range(blocks)])
    hi = np.array([ends[b * BLOCK : (b + 1) * BLOCK].max() for b in range(blocks)])
    steps = np.arange(blocks) * stride
    origin = int((lo - steps).min())
    window = int((hi - origin - steps).max())
    pad_lo = max(0, -origin)
    pad_hi = max(0, origin + (blocks - 1) * stride + window - in_size)
    weights = np.zeros((blocks, BLOCK, window))
    for o in range(count):
        b, j = divmod(o, BLOCK)
        at = starts[o] - origin - b * stride
        n = min(ksize, window - at)
        weights[b, j, at : at + n] = fixed[o, :n]
    return AxisPlan(count, blocks, stride, origin + pad_lo, window, pad_lo, pad_hi, weights)


@functools.lru_cache(maxsize=512)
def _weights(plan: AxisPlan, dtype: torch.dtype, transposed: bool) -> torch.Tensor:
    w = torch.from_numpy(plan.weights).to(dtype)
    return w.transpose(1, 2).contiguous() if transposed else w


def vertical_first(in_h: int, in_w: int, out_h: int, out_w: int) -> bool:
    """Whether Pillow 13 runs the vertical pass first for this resize."""
    return out_h < in_h and in_h - out_h > 2 * (in_w - out_w)


def _round_clip(x: torch.Tensor) -> torch.Tensor:
    # Sums are in units of 2**-22; Pillow adds half a unit of the result, floors and clips.
    return x.mul_(2.0**-PRECISION_BITS).add_(0.5).floor_().clamp_(0, 255)


@functools.lru_cache(maxsize=512)
def _sparse_weights(
    plan: AxisPlan, in_size: int, out_size: int, first: int, mode: str, dtype: torch.dtype
) -> torch.Tensor:
    """The plan's outputs as a sparse CSR ``(count, pad_lo + in_size + pad_hi)`` matrix."""
    starts, fixed = fixed_point_taps(in_size, out_size, mode)
    starts, fixed = starts[first : first + plan.count], fixed[first : first + plan.count]
    ksize = fixed.shape[1]
    columns = starts[:, None] + np.arange(ksize)[None, :]
    keep = (fixed != 0) & (columns < in_size)
    crow = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta state"
        return torch.sparse_csr_tensor(
            torch.from_numpy(crow),
            torch.from_numpy(columns[keep] + plan.pad_lo),
            torch.from_numpy(fixed[keep]).to(dtype),
            size=(plan.count, plan.pad_lo + in_size + plan.pad_hi),
            check_invariants=True,  # built once per size and cached: the check is cheap
        )


def _pass_outer(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Resize axis 0 of a contiguous ``(L, M)`` matrix with sparse ``(count, L)`` weights."""
    return _round_clip(weights @ x)


def _pass_inner(x: torch.Tensor, plan: AxisPlan, dtype: torch.dtype) -> torch.Tensor:
    """Resize the last axis of a contiguous ``(M, L)`` matrix (padded) -> ``(blocks, M, BLOCK)``."""
    m, length = x.shape
    windows = x.as_strided((plan.blocks, m, plan.window), (plan.stride, length, 1), plan.offset)
    out = torch.bmm(windows, _weights(plan, dtype, True))
    return _round_clip(out)


def resize_batch(
    batch: torch.Tensor,
    size: tuple[int, int],
    crop: tuple[int, int, int, int] | None = None,
    mode: str = "bicubic",
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Resize a uint8 ``(N, C, H, W)`` batch to ``size`` exactly as Pillow does.

    ``crop`` ``(top, left, height, width)`` selects the part of the resized image to compute
    (the rest is never computed). Returns an ``(N, C, h, w)`` view of ``dtype`` holding
    Pillow's uint8 values (integers 0-255).
    """
    n, c, in_h, in_w = batch.shape
    out_h, out_w = size
    top, left, crop_h, crop_w = crop if crop is not None else (0, 0, out_h, out_w)
    planes = n * c
    rows = axis_plan(in_h, out_h, top, crop_h, mode) if out_h != in_h else None
    cols = axis_plan(in_w, out_w, left, crop_w, mode) if out_w != in_w else None
    ph = (rows.pad_lo, rows.pad_hi) if rows else (0, 0)
    pw = (cols.pad_lo, cols.pad_hi) if cols else (0, 0)
    hp, wp = in_h + sum(ph), in_w + sum(pw)
    # One copy: uint8 (N*C, H, W) -> zero-padded float (H, N*C, W), rows outermost.
    x = torch.empty((hp, planes, wp), dtype=dtype)
    for pad in (x[: ph[0]], x[hp - ph[1] :], x[:, :, : pw[0]], x[:, :, wp - pw[1] :]):
        if pad.numel():
            pad.zero_()  # only the pads: zero weights times zero pixels
    x[ph[0] : ph[0] + in_h, :, pw[0] : pw[0] + in_w] = batch.reshape(planes, in_h, in_w).permute(1, 0, 2)
    if rows is not None and (cols is None or vertical_first(in_h, in_w, out_h, out_w)):
        x = _pass_outer(x.view(hp, -1), _sparse_weights(rows, in_h, out_h, top, mode, dtype))
        x = x.reshape(crop_h * planes, wp)
        if cols is None:
            x = x.view(crop_h, planes, wp)[..., left : left + crop_w]
            return x.permute(1, 0, 2).reshape(n, c, crop_h, crop_w)
        y = _pass_inner(x, cols, dtype)  # (blocks, crop_h * planes, BLOCK)
        y = y.view(cols.blocks, crop_h, planes, BLOCK).permute(2, 1, 0, 3)
        return y.reshape(planes, crop_h, cols.blocks * BLOCK)[..., :crop_w].view(n, c, crop_h, crop_w)
    if cols is None:  # no resize at all, or only rows handled above
        x = x[ph[0] : ph[0] + in_h][top : top + crop_h, :, left : left + crop_w]
        return x.permute(1, 0, 2).reshape(n, c, crop_h, crop_w)
    y = _pass_inner(x.view(hp * planes, wp), cols, dtype)  # (blocks, hp * planes, BLOCK)
    if rows is None:
        y = y.view(cols.blocks, hp, planes, BLOCK)[:, top : top + crop_h]
        y = y.permute(2, 1, 0, 3).reshape(planes, crop_h, cols.blocks * BLOCK)
        return y[..., :crop_w].reshape(n, c, crop_h, crop_w)
    # Horizontal first: bring rows outermost again, (hp, planes, crop_w).
    y = y.view(cols.blocks, hp, planes, BLOCK).permute(1, 2, 0, 3).reshape(hp, planes, -1)
    y = y[..., :crop_w].contiguous().view(hp, -1)
    z = _pass_outer(y, _sparse_weights(rows, in_h, out_h, top, mode, dtype))  # (crop_h, planes * crop_w)
    return z.view(crop_h, planes, crop_w).permute(1, 0, 2).reshape(n, c, crop_h, crop_w)
