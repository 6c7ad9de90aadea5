"""``fast-qwen2-vl``: Qwen2-VL / Qwen2.5-VL / Qwen3-VL image preprocessing on uint8.

Per image: read the size (an encoded image's header), compute the target with
:func:`~energon_plugin_fast_image.qwen_settings.smart_resize`, decode (JPEGs by torchvision,
or in PIL's draft mode with ``jpeg_draft``), resize with torch's uint8 antialiased bicubic
kernel (the call transformers' default torchvision backend makes, so the same pixels), then,
band by band, rescale and normalize, cut the patches and repeat them over the temporal patch
into the ``(patches, C * T * p * p)`` float32 output, which holds every image
of the call (no concatenation) and, in a loader worker, is allocated in shared memory (the
batch goes to the main process without another copy). ``image_grid_thw`` is ``(1, h / p, w / p)`` per
image, as transformers gives it.
"""

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from energon_plugin_fast_image.processor import FastBatchFeature, call_items, torch_threads
from energon_plugin_fast_image.qwen_settings import QwenSettings, resolve_qwen_settings, smart_resize
from energon_plugins import image_height_width, is_encoded, new_output, to_uint8_chw

CHANNELS = 3
BAND_BYTES = 2 << 20
"""Float32 bytes normalized per band before its patches are laid out (about a core's L2)."""


@dataclasses.dataclass
class FastQwen2VLProcessor:
    """A callable image processor with the settings and output of transformers' Qwen2-VL one.

    ``proc(images=[...], return_tensors="pt")`` returns ``pixel_values`` ``(patches, C * T *
    p * p)`` and ``image_grid_thw`` ``(N, 3)``. Attributes are named as in transformers
    (``patch_size``, ``merge_size``, ``temporal_patch_size``, ``min_pixels``, ``max_pixels``,
    ``size``, ``image_mean``, ``image_std``), so the ``qwen2-vl`` task encoder reads them.
    """

    settings: QwenSettings
    torch_threads: int | None = 1
    """torch intra-op threads while a call runs (restored after), or None to leave them."""
    jpeg_draft: bool = False
    """Decode JPEGs at a reduced scale (DCT domain) when the target allows."""

    accepts_energon_images = True
    image_input = "bytes"
    """Energon hands over the encoded images; they are decoded here."""
    model_input_names = ("pixel_values", "image_grid_thw")

    def __post_init__(self) -> None:
        self._buffers: dict[str, Any] = {}
        s = self.settings
        std = torch.tensor(s.image_std, dtype=torch.float32)
        self._scale = (s.rescale_factor / std).view(1, CHANNELS, 1, 1)
        self._bias = (-torch.tensor(s.image_mean, dtype=torch.float32) / std).view(1, CHANNELS, 1, 1)

    # -- transformers-style attributes ---------------------------------------------------------
    patch_size = property(lambda self: self.settings.patch_size)
    temporal_patch_size = property(lambda self: self.settings.temporal_patch_size)
    merge_size = property(lambda self: self.settings.merge_size)
    min_pixels = property(lambda self: self.settings.min_pixels)
    max_pixels = property(lambda self: self.settings.max_pixels)
    size = property(lambda self: {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels})
    image_mean = property(lambda self: list(self.settings.image_mean))
    image_std = property(lambda self: list(self.settings.image_std))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a transformers-style dict."""
        return {
            **dataclasses.asdict(self.settings),
            "size": self.size,
            "image_processor_type": "fast-qwen2-vl",
        }

    # -- planning ------------------------------------------------------------------------------
    def resize_target(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` an image of this size is resized to."""
        s = self.settings
        return smart_resize(height, width, s.factor, s.min_pixels, s.max_pixels)

    def grid_for(self, height: int, width: int) -> tuple[int, int, int]:
        """The ``image_grid_thw`` row of an image of this size (known before decoding)."""
        rh, rw = self.resize_target(height, width)
        return 1, rh // self.patch_size, rw // self.patch_size

    # -- processing ----------------------------------------------------------------------------
    def _resized(self, image: Any, index: int) -> torch.Tensor:
        """One image decoded and resized to its target: uint8 ``(3, h, w)``."""
        height, width = image_height_width(image)
        target = self.resize_target(height, width)
        draft = target if self.jpeg_draft and is_encoded(image) else None
        chw = to_uint8_chw(image, min_size=draft, index=index)
        if tuple(chw.shape[-2:]) == target:
            return chw
        return F.interpolate(chw[None], size=target, mode="bicubic", antialias=True, align_corners=False)[0]

    def _write_patches(self, chw: torch.Tensor, out: torch.Tensor) -> None:
        """Cut ``chw`` into merge-ordered patches and write them normalized into ``out`` rows.

        Band by band (rows of merged patches, about :data:`BAND_BYTES` of float32 each, so the
        band stays in the core's cache): uint8 -> float copy, in-place scale and shift (torch's
        fused mixed-dtype kernels are several times slower), then one permuting copy lays the
        band's patches out ``t`` times (an image is its own video of ``t`` identical frames).
        A whole large image at once measured 1.3-2x slower: its float copy leaves the cache
        before the permuting copy reads it.
        """
        p, m, t = self.patch_size, self.merge_size, self.temporal_patch_size
        _, height, width = chw.shape
        merged_rows, merged_cols = height // (p * m), width // (p * m)
        rows_per_band = max(1, BAND_BYTES // (CHANNELS * m * p * width * 4))
        band_height = min(rows_per_band, merged_rows) * m * p
        scratch = torch.from_numpy(self._buffer("band", CHANNELS * band_height * width, np.float32))
        target = out.view(merged_rows, merged_cols, m, m, CHANNELS, t, p, p)
        for first in range(0, merged_rows, rows_per_band):
            rows = min(rows_per_band, merged_rows - first)
            band = scratch[: CHANNELS * rows * m * p * width].view(CHANNELS, rows * m * p, width)
            band.copy_(chw[:, first * m * p : (first + rows) * m * p])
            band.mul_(self._scale[0]).add_(self._bias[0])
            # (C, rows, m, p, cols, m, p) -> (rows, cols, m, m, C, p, p), repeated over t
            patches = band.view(CHANNELS, rows, m, p, merged_cols, m, p).permute(1, 4, 2, 5, 0, 3, 6)
            target[first : first + rows].copy_(patches.unsqueeze(5).expand(-1, -1, -1, -1, -1, t, -1, -1))

    def _buffer(self, name: str, size: int, dtype: Any) -> np.ndarray:
        """A reused scratch array of at least ``size`` elements (its first ``size``).

        Fresh multi-megabyte arrays cost page faults on every call (glibc maps and unmaps
        them); the scratch space is kept for the next image instead.
        """
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(size, dtype)
        return buffer[:size]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_buffers"] = {}  # scratch space is not copied into loader workers
        return state

    def __call__(self, images: Any = None, return_tensors: str | None = "pt", **kwargs: Any):
        """Preprocess ``images`` (one image or a list); ``pixel_values`` and ``image_grid_thw``.

        Other keyword arguments of transformers processors are refused with an error that
        names them, rather than silently ignored.
        """
        items = call_items("fast-qwen2-vl", images, kwargs)
        with torch_threads(self.torch_threads):
            resized = [self._resized(img, i) for i, img in enumerate(items)]
            p = self.patch_size
            grids = [(1, r.shape[-2] // p, r.shape[-1] // p) for r in resized]
            rows = [gh * gw for _, gh, gw in grids]
            width = CHANNELS * self.temporal_patch_size * p * p
            pixel_values = new_output((sum(rows), width))  # shared memory in a loader worker
            start = 0
            for chw, n in zip(resized, rows):
                self._write_patches(chw, pixel_values[start : start + n])
                start += n
        grid = torch.tensor(grids, dtype=torch.long)
        if return_tensors in (None, "pt"):
            return FastBatchFeature(pixel_values=pixel_values, image_grid_thw=grid)
        if return_tensors == "np":
            return FastBatchFeature(pixel_values=pixel_values.numpy(), image_grid_thw=grid.numpy())
        raise ValueError(f"return_tensors: expected 'pt' or 'np', got {return_tensors!r}")

    preprocess = __call__


def build_fast_qwen2_vl(options: Any, context: Any = None) -> FastQwen2VLProcessor:
    """Factory of ``fast-qwen2-vl``: the ``model`` preset, ``path``'s file, then ``options``."""
    return FastQwen2VLProcessor(
        resolve_qwen_settings(options),
        torch_threads=getattr(options, "torch_threads", 1) if options is not None else 1,
        jpeg_draft=bool(getattr(options, "jpeg_draft", False)) if options is not None else False,
    )
