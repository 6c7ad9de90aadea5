"""Tiling image processors (InternVL's, LLaVA-OneVision's) through kernels that give
transformers' own pixels, bit for bit.

InternVL's ``GotOcr2ImageProcessor`` resizes an image to a grid of tiles and cuts it, adds a
thumbnail; LLaVA-OneVision's ``LlavaOnevisionImageProcessor`` resizes a single image into the
best of its grid resolutions, pads and cuts it, and puts the whole image, resized, first. On
small tiles transformers' per-call work costs more than the pixels: the keyword-argument
validation, the grouping and stacking of the images and of the tiles, a resize call per tile
that resizes nothing, a uint8 copy of every tile, and the three-byte copy of every decoded
image. :class:`FastTiledImages` and :class:`FastAnyResImages` make the same resizes
(torchvision's ``resize``, antialiased bicubic on uint8, as transformers calls it) on the
image's :func:`~.fast_images.pixel_planes`, write the tiles straight into the float32 output
and normalize them there with transformers' operations (``sub_`` of ``mean / rescale_factor``,
then ``div_`` of ``std / rescale_factor``).

:func:`tiled_image_processor` picks them only where the image processor is exactly that class
with its usual steps; a call with anything else (another keyword argument, an image that is
not an RGB PIL image, several images for one text for LLaVA-OneVision) goes to transformers'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from energon_plugin_hf_processor.fast_images import (
    CHANNELS,
    WrappedImageProcessor,
    flat_images,
    is_rgb_pil,
    pixel_planes,
    usual_steps,
)

#: Keyword arguments the tiled path reads, each with the type it takes.
TILED_KWARGS = {"crop_to_patches": bool, "min_patches": int, "max_patches": int}


def tiled_image_processor(image_processor: Any) -> Any | None:
    """:class:`FastTiledImages` for transformers' ``GotOcr2ImageProcessor``,
    :class:`FastAnyResImages` for its ``LlavaOnevisionImageProcessor`` (with their usual
    steps), else ``None``."""
    if tiled_path_applies(image_processor):
        return FastTiledImages(image_processor)
    if anyres_path_applies(image_processor):
        return FastAnyResImages(image_processor)
    return None


def tiled_path_applies(image_processor: Any) -> bool:
    """Whether ``image_processor`` is transformers' (torchvision) ``GotOcr2ImageProcessor``
    (InternVL's) with its usual steps and a tile ``size`` of a height and a width only."""
    try:
        from transformers import GotOcr2ImageProcessor
    except ImportError:  # pragma: no cover - transformers without GOT-OCR2
        return False
    return (
        type(image_processor) is GotOcr2ImageProcessor
        and usual_steps(image_processor)
        and _tile_size(image_processor) is not None
    )


def anyres_path_applies(image_processor: Any) -> bool:
    """Whether ``image_processor`` is transformers' ``LlavaOnevisionImageProcessor`` with its
    usual steps, square tiles (``size``), no centre crop, and grid resolutions that are whole
    numbers of tiles (so no tile is resized after the cut)."""
    try:
        from transformers import LlavaOnevisionImageProcessor
    except ImportError:  # pragma: no cover - transformers without LLaVA-OneVision
        return False
    if type(image_processor) is not LlavaOnevisionImageProcessor or not usual_steps(image_processor):
        return False
    tile = _tile_size(image_processor)
    crop: Any = getattr(image_processor, "crop_size", None)
    pinpoints = getattr(image_processor, "image_grid_pinpoints", None)
    return (
        tile is not None
        and tile[0] == tile[1]
        and not getattr(image_processor, "do_center_crop", None)
        and (not crop or getattr(crop, "height", None) == tile[0])
        and isinstance(pinpoints, list)
        and bool(pinpoints)
        and all(
            isinstance(point, list | tuple)
            and len(point) == 2
            and all(isinstance(edge, int) and edge > 0 and edge % tile[0] == 0 for edge in point)
            for point in pinpoints
        )
    )


def _tile_size(image_processor: Any) -> tuple[int, int] | None:
    """The ``(height, width)`` of the processor's ``size`` where it holds those two only."""
    size: Any = getattr(image_processor, "size", None)
    edges = {key: getattr(size, key, None) for key in ("height", "width")}
    if not all(isinstance(edge, int) and edge > 0 for edge in edges.values()) or dict(size) != edges:
        return None
    return edges["height"], edges["width"]


def _resized(planes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``planes`` resized as transformers' torchvision backend resizes (antialiased bicubic):
    uint8 ``(3, height, width)``."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as tvF

    resized = tvF.resize(
        planes[None], [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True
    )
    return resized[0, :CHANNELS]


def _write_grid(grid: torch.Tensor, rows: int, columns: int, out: torch.Tensor) -> None:
    """The tiles of ``grid`` ``(C, rows * h, columns * w)``, row by row, into ``out``."""
    height, width = out.shape[-2:]
    tiles = grid.reshape(CHANNELS, rows, height, columns, width).permute(1, 3, 0, 2, 4)
    out[: rows * columns].view(rows, columns, CHANNELS, height, width).copy_(tiles)


class FastTiledImages(WrappedImageProcessor):
    """transformers' ``GotOcr2ImageProcessor`` (InternVL's) with a faster call for RGB PIL images.

    A call it cannot make with the same result (another keyword argument, another kind of
    image) is the wrapped processor's call.

    Args:
        image_processor: the ``GotOcr2ImageProcessor`` (see :func:`tiled_path_applies`).
    """

    def __call__(self, images: Any = None, **kwargs: Any) -> Any:
        """``pixel_values`` ``(tiles, C, H, W)`` (each image's tiles, then its thumbnail) and
        ``num_patches`` (tiles per image), as the wrapped image processor returns them."""
        settings = self._settings(kwargs)
        items = flat_images(images)
        if settings is None or not items or not all(is_rgb_pil(item) for item in items):
            return self.wrapped(images, **kwargs)
        from transformers import BatchFeature
        from transformers.models.got_ocr2.image_processing_got_ocr2 import get_optimal_tiled_canvas

        crop, low, high = settings
        tile = (self.wrapped.size.height, self.wrapped.size.width)
        planes = [pixel_planes(item) for item in items]
        # Per image its (columns, rows); (1, 1) is one tile of the whole image, no thumbnail.
        grids = [
            get_optimal_tiled_canvas(tuple(chw.shape[-2:]), tile, low, high) if crop else (1, 1)
            for chw in planes
        ]
        counts = [columns * rows + (columns * rows > 1) for columns, rows in grids]
        pixel_values = torch.empty((sum(counts), CHANNELS, *tile))
        start = 0
        for chw, (columns, rows), count in zip(planes, grids, counts, strict=True):
            out = pixel_values[start : start + count]
            _write_grid(_resized(chw, tile[0] * rows, tile[1] * columns), rows, columns, out)
            if count > 1:
                out[-1].copy_(_resized(chw, *tile))
            start += count
        pixel_values.sub_(self.mean).div_(self.std)
        data = {"pixel_values": pixel_values, "num_patches": counts}
        return BatchFeature(data=data, tensor_type=kwargs.get("return_tensors"))

    def _settings(self, kwargs: Mapping[str, Any]) -> tuple[bool, int, int] | None:
        """The call's ``(crop_to_patches, min_patches, max_patches)``; ``None`` where the call
        asks for something the tiled path does not do."""
        if set(kwargs) - set(TILED_KWARGS) - {"return_tensors"} or kwargs.get("return_tensors") != "pt":
            return None
        values = [kwargs.get(name, getattr(self.wrapped, name, None)) for name in TILED_KWARGS]
        if not all(type(value) is kind for value, kind in zip(values, TILED_KWARGS.values(), strict=True)):
            return None
        crop, low, high = values
        return (crop, low, high) if 1 <= low <= high or not crop else None


class FastAnyResImages(WrappedImageProcessor):
    """transformers' ``LlavaOnevisionImageProcessor`` with a faster call for one RGB PIL image
    per text (the images transformers cuts into tiles).

    A call it cannot make with the same result (a keyword argument, several images for one
    text, another kind of image) is the wrapped processor's call.

    Args:
        image_processor: the ``LlavaOnevisionImageProcessor`` (see :func:`anyres_path_applies`).
    """

    def __call__(self, images: Any = None, **kwargs: Any) -> Any:
        """``pixel_values`` ``(images, tiles, C, H, W)`` (the whole image resized, then its
        tiles; zero tiles pad to the call's most), ``image_sizes`` and ``batch_num_images``, as
        the wrapped image processor returns them."""
        items = self._single_images(images)
        if set(kwargs) != {"return_tensors"} or kwargs["return_tensors"] != "pt" or items is None:
            return self.wrapped(images, **kwargs)
        from torchvision.transforms.v2 import functional as tvF
        from transformers import BatchFeature
        from transformers.image_processing_utils import get_patch_output_size, select_best_resolution
        from transformers.image_utils import ChannelDimension

        side = self.wrapped.size.height
        planes = [pixel_planes(item) for item in items]
        sizes = [(int(chw.shape[-2]), int(chw.shape[-1])) for chw in planes]
        bests = [select_best_resolution(size, self.wrapped.image_grid_pinpoints) for size in sizes]
        counts = [1 + (height // side) * (width // side) for height, width in bests]
        pixel_values = []
        for chw, (height, width), count in zip(planes, bests, counts, strict=True):
            out = torch.empty((count, CHANNELS, side, side))
            new_height, new_width = get_patch_output_size(
                chw[:CHANNELS], (height, width), ChannelDimension.FIRST
            )
            left, right = divmod(width - new_width, 2)
            top, bottom = divmod(height - new_height, 2)
            padded = tvF.pad(
                _resized(chw, new_height, new_width), padding=[left, top, left + right, top + bottom]
            )
            out[0].copy_(_resized(chw, side, side))
            _write_grid(padded, height // side, width // side, out[1:])
            pixel_values.append(out.sub_(self.mean).div_(self.std))
        if self.wrapped.do_pad:  # zero tiles up to the call's most (after normalizing)
            most = max(counts)
            pixel_values = [
                torch.nn.functional.pad(out, [0, 0, 0, 0, 0, 0, 0, most - len(out)]) for out in pixel_values
            ]
        data = {"pixel_values": pixel_values, "image_sizes": sizes, "batch_num_images": [1] * len(items)}
        return BatchFeature(data=data, tensor_type="pt")

    @staticmethod
    def _single_images(images: Any) -> list[Any] | None:
        """The call's images where each text has exactly one RGB PIL image; else ``None``."""
        if isinstance(images, list | tuple) and images and isinstance(images[0], list | tuple):
            if any(len(part) > 1 for part in images):
                return None  # several images for one text: not cut into tiles
            items = [part[0] for part in images if part]
        elif isinstance(images, list | tuple):
            items = list(images)
        else:
            items = [images]
        return items if items and all(is_rgb_pil(item) for item in items) else None
