"""The images ``energon-plugins preview`` draws from an ``hf-processor`` batch.

Most families' ``pixel_values`` hold one entry per image (or per tile, which the core's
``row_images`` sorts out). Two layouts need the family's own reading: a one-row image layout
(Idefics3, SmolVLM: every sub-image of the batch in row 0, each image's last one the whole
image) and Mllama's per-row tiles (``(B, images, tiles, C, H, W)``, an image's tiles being the
crops of its resized canvas, in row-major order of the tile grid its ``aspect_ratio_ids``
names), stitched back into one picture here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def tile_grids(max_image_tiles: int) -> list[tuple[int, int]]:
    """Mllama's tile grids ``(rows, columns)`` in the order of its aspect-ratio ids (id ``k``
    is entry ``k - 1``; id 0 pads): transformers' ``get_all_supported_aspect_ratios``."""
    return [
        (h, w)
        for h in range(1, max_image_tiles + 1)
        for w in range(1, max_image_tiles + 1)
        if h * w <= max_image_tiles
    ]


def stitched_tiles(tiles: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """The ``(C, rows*T, columns*T)`` canvas of ``tiles`` ``(n, C, T, T)`` laid out on ``grid``."""
    rows, columns = grid
    used = tiles[: rows * columns]
    channels, height, width = used.shape[1:]
    return (
        used.view(rows, columns, channels, height, width)
        .permute(2, 0, 3, 1, 4)
        .reshape(channels, rows * height, columns * width)
    )


def mllama_images(batch: Any, processor: Any) -> list[list[torch.Tensor]]:
    """Per row of a Mllama batch, each image's tiles stitched into its canvas."""
    if batch.pixel_values is None:
        return [[] for _ in batch.num_images.tolist()]
    most = int(getattr(processor.image_processor, "max_image_tiles", batch.pixel_values.shape[2]))
    grids = tile_grids(most)
    ratio_ids = batch.visual["aspect_ratio_ids"]
    drawn = []
    for row, count in enumerate(batch.num_images.tolist()):
        images = []
        for image in range(int(count)):
            ratio = int(ratio_ids[row, image])
            grid = grids[ratio - 1] if 0 < ratio <= len(grids) else (1, 1)
            images.append(stitched_tiles(batch.pixel_values[row, image], grid))
        drawn.append(images)
    return drawn


def one_row_images(batch: Any, processor: Any) -> list[list[torch.Tensor]]:
    """Per row, each image's last sub-image (the whole image) of a one-row image layout."""
    per_image = getattr(processor, "image_seq_len", 1) or 1
    subs = [max(1, int(n) // per_image) for n in batch.image_token_counts.tolist()]
    flat, rows, image, offset = batch.pixel_values[0], [], 0, 0
    for count in batch.num_images.tolist():
        drawn = []
        for _ in range(int(count)):
            offset += subs[image]
            drawn.append(flat[offset - 1])
            image += 1
        rows.append(drawn)
    return rows


LAYOUT_IMAGES: dict[str, Callable[[Any, Any], list[list[torch.Tensor]]]] = {"mllama": mllama_images}
"""Per batch layout (:attr:`~.family_spec.FamilySpec.batch_layout`), how its images are drawn
(``draw(batch, processor)``); a layout without an entry draws none of its own."""


class PreviewImages:
    """Mixin of the task encoder: the two things ``preview`` asks of it about pictures."""

    family: Any
    processor: Any
    image_processor: Any
    video: Any

    @property
    def video_processor(self) -> Any:
        """The processor's video processor (``preview`` undoes its normalisation), or ``None``."""
        return self.video.video_processor

    def preview_images(self, batch: Any) -> list[list[torch.Tensor]]:
        """Per row, the ``(C, H, W)`` images ``preview`` draws."""
        from energon_plugins import row_images

        draw = LAYOUT_IMAGES.get(self.family.batch_layout or "")
        if draw is not None:
            return draw(batch, self.processor)
        if self.family.pixel_values != "image_row" or batch.pixel_values is None:
            return row_images(batch, self.image_processor)
        return one_row_images(batch, self.processor)
