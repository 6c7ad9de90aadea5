"""Qwen-style images through a banded kernel that gives transformers' own pixels, bit for bit.

transformers' ``Qwen2VLImageProcessor`` (Qwen2-VL, Qwen2.5-VL and Qwen3-VL use it) copies
each image four times after decoding: a contiguous channel-first copy, a stack of the images
of one shape, a float32 copy that is normalized, and the patch layout (``reshape`` of a
permuted view). :class:`FastQwenImages` calls the same resize (torchvision's ``resize``,
antialiased bicubic on uint8, as transformers calls it) on the decoded image as it is, a
channels-last view (torch's uint8 kernel works channels-last: a channel-first input is first
copied back to it, 3-4x the time of the resize itself on 1,000-pixel photographs), then
normalizes and lays out the patches band by band (a band stays in the core's cache) straight
into the output, with the operations transformers uses (``sub_`` of ``mean / rescale_factor``,
then ``div_`` of ``std / rescale_factor``, in float32), so every value is the same.

InternVL's and LLaVA-OneVision's tiling image processors get the kernels of
:mod:`.fast_tiles`, built on :func:`pixel_planes` (an image's pixels without a copy).

:func:`fast_image_processor` picks them only where the image processor is exactly that class
with its usual steps (resize, rescale, normalize, RGB conversion, bicubic); a call with anything
else (another keyword argument, an image that is not an RGB PIL image) goes to transformers'.
Any other torchvision-backend image processor gets :func:`channels_last_images`, which drops
one copy of every image. :mod:`.fast_calls` puts them in the processor the encoder calls.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

CHANNELS = 3
BAND_BYTES = 2 << 20
"""Float32 bytes normalized per band before its patches are laid out (about a core's L2)."""
BICUBIC = 3
"""PIL's ``Resampling.BICUBIC``, the resample of Qwen's image processors."""
#: Keyword arguments the fast path reads (any other goes to transformers' image processor).
FAST_KWARGS = frozenset({"size", "return_tensors"})


def fast_image_processor(image_processor: Any) -> Any | None:
    """A faster image processor giving the same pixels as ``image_processor``, or ``None``:
    :class:`FastQwenImages` for transformers' ``Qwen2VLImageProcessor`` with its usual steps,
    :func:`channels_last_images` for any other torchvision-backend one."""
    if fast_path_applies(image_processor):
        return FastQwenImages(image_processor)
    from energon_plugin_hf_processor.fast_tiles import tiled_image_processor

    tiled = tiled_image_processor(image_processor)
    if tiled is not None:
        return tiled
    if _torchvision_backend(image_processor):
        return channels_last_images(image_processor)
    return None


def channels_last_images(image_processor: Any) -> Any:
    """A shallow copy of a torchvision-backend image processor that takes an RGB PIL image
    as a channels-last view of its pixels instead of a channel-first copy.

    transformers' ``process_image`` copies every decoded image to channel-first memory; its
    resize (torch's uint8 antialiased kernels) then copies it back to channels-last before it
    starts. The values are the same either way (every later step is elementwise, a crop, a
    pad or a resize), so the copy goes; a call with a device, or an image of another mode or
    type, is transformers' own.
    """
    faster = copy.copy(image_processor)
    faster.process_image = ChannelsLastConversion(image_processor.process_image)
    return faster


class ChannelsLastConversion:
    """``process_image`` that takes an RGB PIL image as a channels-last view (see
    :func:`channels_last_images`); anything else goes to ``convert``, transformers' own."""

    def __init__(self, convert: Any) -> None:
        self.convert = convert

    def __call__(self, image: Any, *args: Any, **kwargs: Any) -> Any:
        """The image as transformers' torchvision backend converts it, as uint8 ``(3, H, W)``."""
        if not args and kwargs.get("device") is None and is_rgb_pil(image):
            return torch.from_numpy(np.array(image)).permute(2, 0, 1)
        return self.convert(image, *args, **kwargs)


def _torchvision_backend(image_processor: Any) -> bool:
    """Whether ``image_processor`` converts images with transformers' torchvision backend."""
    try:
        from transformers.image_processing_backends import TorchvisionBackend
    except ImportError:  # pragma: no cover - a transformers without backends
        return False
    return getattr(type(image_processor), "process_image", None) is TorchvisionBackend.process_image


def fast_path_applies(image_processor: Any) -> bool:
    """Whether ``image_processor`` is transformers' (torchvision) ``Qwen2VLImageProcessor`` set
    to resize (bicubic), rescale, normalize (three channels) and convert to RGB."""
    try:
        from transformers import Qwen2VLImageProcessor
    except ImportError:  # pragma: no cover - transformers without Qwen2-VL
        return False
    return type(image_processor) is Qwen2VLImageProcessor and usual_steps(image_processor)


def usual_steps(image_processor: Any) -> bool:
    """Resize (bicubic), rescale, normalize (three channels) and convert to RGB, all on."""
    steps = ("do_resize", "do_rescale", "do_normalize", "do_convert_rgb")
    try:
        return (
            all(getattr(image_processor, step, None) is True for step in steps)
            and int(getattr(image_processor, "resample", -1)) == BICUBIC
            and len(list(image_processor.image_mean)) == CHANNELS
            and len(list(image_processor.image_std)) == CHANNELS
        )
    except (TypeError, ValueError):  # a resample or mean of another kind
        return False


class WrappedImageProcessor:
    """An image processor behind a fast kernel: every attribute is the wrapped one's; ``mean``
    and ``std`` are transformers' fused rescale and normalize: float32 ``mean /
    rescale_factor`` and ``std / rescale_factor`` (subtracted, then divided)."""

    def __init__(self, image_processor: Any) -> None:
        self.wrapped = image_processor
        inverse = 1.0 / image_processor.rescale_factor
        self.mean = (torch.tensor(image_processor.image_mean) * inverse).view(CHANNELS, 1, 1)
        self.std = (torch.tensor(image_processor.image_std) * inverse).view(CHANNELS, 1, 1)

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.wrapped, name)


class FastQwenImages(WrappedImageProcessor):
    """transformers' ``Qwen2VLImageProcessor`` with a faster call for RGB PIL images.

    Every attribute is the wrapped image processor's; a call it cannot make with the same
    result (another keyword argument, another kind of image) is the wrapped processor's call.

    Args:
        image_processor: the ``Qwen2VLImageProcessor`` (see :func:`fast_path_applies`).
    """

    def __call__(self, images: Any = None, **kwargs: Any) -> Any:
        """``pixel_values`` ``(patches, C * T * p * p)`` and ``image_grid_thw`` ``(N, 3)``, as
        the wrapped image processor returns them."""
        edges = self._edges(kwargs)
        items = flat_images(images)
        if edges is None or not items or not all(is_rgb_pil(item) for item in items):
            return self.wrapped(images, **kwargs)
        from transformers import BatchFeature
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        p, m = self.wrapped.patch_size, self.wrapped.merge_size
        resized = [self._resized(item, smart_resize, p * m, *edges) for item in items]
        grids = [(1, chw.shape[-2] // p, chw.shape[-1] // p) for chw in resized]
        rows = [h * w for _, h, w in grids]
        pixel_values = torch.empty((sum(rows), CHANNELS * self.wrapped.temporal_patch_size * p * p))
        start = 0
        for chw, count in zip(resized, rows, strict=True):
            self._write_patches(chw, pixel_values[start : start + count])
            start += count
        data = {"pixel_values": pixel_values, "image_grid_thw": torch.tensor(grids, dtype=torch.long)}
        return BatchFeature(data=data, tensor_type=kwargs.get("return_tensors"))

    def _edges(self, kwargs: Mapping[str, Any]) -> tuple[int, int] | None:
        """The call's ``(shortest_edge, longest_edge)`` pixel budget; ``None`` where the call
        asks for something the fast path does not do."""
        if set(kwargs) - FAST_KWARGS or kwargs.get("return_tensors") not in (None, "pt"):
            return None
        size = kwargs.get("size")
        size = self.wrapped.size if size is None else size
        edges = tuple(
            size.get(key) if isinstance(size, Mapping) else getattr(size, key, None)
            for key in ("shortest_edge", "longest_edge")
        )
        return edges if all(isinstance(edge, int) for edge in edges) else None  # type: ignore[return-value]

    @staticmethod
    def _resized(image: Any, smart_resize: Any, factor: int, shortest: int, longest: int) -> torch.Tensor:
        """One image as transformers resizes it: uint8 ``(3, h, w)`` (channels-last)."""
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2 import functional as tvF

        # A channels-last view: torch's uint8 antialiased kernel works channels-last and
        # converts a channel-first input first (the same values; this saves that copy).
        planes = pixel_planes(image)
        height, width = planes.shape[-2:]
        target = smart_resize(height, width, factor=factor, min_pixels=shortest, max_pixels=longest)
        resized = tvF.resize(
            planes[None], list(target), interpolation=InterpolationMode.BICUBIC, antialias=True
        )
        return resized[0, :CHANNELS]

    def _write_patches(self, chw: torch.Tensor, out: torch.Tensor) -> None:
        """Normalize ``chw`` band by band and write its merge-ordered patches into ``out``."""
        p, m, t = self.wrapped.patch_size, self.wrapped.merge_size, self.wrapped.temporal_patch_size
        _, height, width = chw.shape
        merged_rows, merged_cols = height // (p * m), width // (p * m)
        rows_per_band = max(1, BAND_BYTES // (CHANNELS * m * p * width * 4))
        target = out.view(merged_rows, merged_cols, m, m, CHANNELS, t, p, p)
        for first in range(0, merged_rows, rows_per_band):
            rows = min(rows_per_band, merged_rows - first)
            band = torch.empty((CHANNELS, rows * m * p, width))
            band.copy_(chw[:, first * m * p : (first + rows) * m * p])
            band.sub_(self.mean).div_(self.std)
            # (C, rows, m, p, cols, m, p) -> (rows, cols, m, m, C, p, p), repeated over t
            patches = band.view(CHANNELS, rows, m, p, merged_cols, m, p).permute(1, 4, 2, 5, 0, 3, 6)
            target[first : first + rows].copy_(patches.unsqueeze(5).expand(-1, -1, -1, -1, -1, t, -1, -1))


def pixel_planes(image: Any) -> torch.Tensor:
    """An RGB PIL image's pixels as a uint8 channels-last ``(C, H, W)`` view, ``C`` 4 or 3: the
    first three planes are R, G and B.

    Pillow keeps an RGB image as four bytes a pixel and exports that memory through Arrow
    without a copy (Pillow >= 11.2); ``np.array(image)`` instead packs it to three bytes in
    Pillow's encoder, 2-4 ms a 1,000-pixel photograph. Torch's uint8 antialiased resize works
    on four-byte pixels anyway (it pads three channels to four) and each plane alone, so a
    resize of the four planes gives the three planes' values, bit for bit. An image Pillow
    cannot export in one piece (rows not contiguous: very large images) is copied with numpy.
    """
    planes = _rgbx_planes(image) if hasattr(image, "__arrow_c_array__") else None
    if planes is None:
        planes = torch.from_numpy(np.array(image)).permute(2, 0, 1)
    return planes


def _rgbx_planes(image: Any) -> torch.Tensor | None:
    """The four-byte pixels of an RGB PIL image as ``(4, H, W)`` planes, or ``None``."""
    import warnings

    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow is a dependency of energon-plugins
        return None
    try:
        exported = pa.array(image)
    except (ValueError, TypeError, pa.ArrowException):  # rows not contiguous, another layout
        return None
    width, height = image.size
    data = exported.buffers()[-1]
    if getattr(exported.type, "list_size", None) != 4 or exported.offset or data.size != height * width * 4:
        return None
    pixels = np.frombuffer(data, dtype=np.uint8).reshape(height, width, 4)
    with warnings.catch_warnings():  # read-only memory, never written: only read by the resize
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(pixels).permute(2, 0, 1)


def flat_images(images: Any) -> list[Any]:
    """The images of a call (one image, a list, or one list per text), in order."""
    if not isinstance(images, list | tuple):
        return [images]
    return [item for part in images for item in (part if isinstance(part, list | tuple) else [part])]


def is_rgb_pil(image: Any) -> bool:
    """Whether ``image`` is a PIL image in RGB mode."""
    from PIL import Image

    return isinstance(image, Image.Image) and image.mode == "RGB"
