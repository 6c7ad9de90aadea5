"""The images and video frames of each row of a collated batch, drawable, whatever the layout.

``preview`` draws the images a batch holds. Pixel values come in several layouts:
``(N, C, H, W)`` images, ``(N, T, C, H, W)`` tiles (the first tile is the whole image
resized, as LLaVA-NeXT / OneVision lay them out), and ``(P, D)`` patches with
``image_grid_thw`` (Qwen2/2.5/3-VL, GLM-4V), which are put back together into the image the
processor resized from the image processor's ``patch_size``, ``merge_size`` and
``temporal_patch_size``. A task encoder with its own layout may define
``preview_images(batch)`` returning the same thing.

Videos (:func:`row_videos`) are ``visual["pixel_values_videos"]``: ``(P, D)`` patches with
``video_grid_thw`` (Qwen; every frame put back) or ``(N, T, C, H, W)`` frames (LLaVA-OneVision);
``preview_videos(batch)`` on the encoder overrides.
"""

from typing import Any


def unpatchify(patches: Any, grid: Any, patch_size: int, merge_size: int, temporal: int) -> list[Any]:
    """Qwen-style ``(P, C*T*p*p)`` patches and ``(N, 3)`` grids -> ``(C, H, W)`` images (frame 0)."""
    return [frames[0] for frames in unpatchify_frames(patches, grid, patch_size, merge_size, temporal)]


def unpatchify_frames(patches: Any, grid: Any, patch_size: int, merge_size: int, temporal: int) -> list[Any]:
    """Qwen-style patches and grids -> per grid entry, its ``(frames, C, H, W)`` frames."""
    images = []
    start = 0
    for t, h, w in grid.tolist():
        count = t * h * w
        block = patches[start : start + count]
        start += count
        channels = block.shape[1] // (temporal * patch_size * patch_size)
        block = block.reshape(
            t,
            h // merge_size,
            w // merge_size,
            merge_size,
            merge_size,
            channels,
            temporal,
            patch_size,
            patch_size,
        )
        # -> (t, temporal, C, h/m, m, p, w/m, m, p): undo the processor's permutation
        block = block.permute(0, 6, 5, 1, 3, 7, 2, 4, 8)
        frames = block.reshape(t * temporal, channels, h * patch_size, w * patch_size)
        images.append(frames)
    return images


def row_images(batch: Any, image_processor: Any = None) -> list[list[Any]]:
    """Per row, the ``(C, H, W)`` (normalised) images of a batch, in order.

    Rows get their images by ``num_images``; a layout that cannot be drawn gives no images.
    """
    pixels = getattr(batch, "pixel_values", None)
    counts = batch.num_images.tolist() if getattr(batch, "num_images", None) is not None else []
    if pixels is None or not counts:
        return [[] for _ in range(int(batch.input_ids.shape[0]))]
    grid = getattr(batch, "image_grid_thw", None)
    if pixels.dim() == 2 and grid is not None and image_processor is not None:
        images = unpatchify(pixels, grid, *_processor_sizes(image_processor))
    elif pixels.dim() == 5:
        images = list(pixels[:, 0])
    elif pixels.dim() == 4:
        images = list(pixels)
    else:
        images = []
    return _per_row(images, counts)


def _per_row(items: list[Any], counts: list[int]) -> list[list[Any]]:
    """``items`` dealt to rows by ``counts`` (a row whose items are missing gets none)."""
    out, offset = [], 0
    for n in counts:
        out.append(items[offset : offset + int(n)] if len(items) >= offset + int(n) else [])
        offset += int(n)
    return out


def _processor_sizes(processor: Any) -> tuple[int, int, int]:
    inner = getattr(processor, "processor", processor)
    return (
        int(getattr(inner, "patch_size", 14)),
        int(getattr(inner, "merge_size", 1)),
        int(getattr(inner, "temporal_patch_size", 1)),
    )


def row_videos(batch: Any, video_processor: Any = None) -> list[list[Any]]:
    """Per row, each video's ``(frames, C, H, W)`` (normalised) frames, in order.

    Rows get their videos by ``num_videos``; a layout that cannot be drawn gives no videos.
    """
    rows = int(batch.input_ids.shape[0])
    counts = getattr(batch, "num_videos", None)
    visual = getattr(batch, "visual", None) or {}
    pixels = visual.get("pixel_values_videos")
    if counts is None or pixels is None:
        return [[] for _ in range(rows)]
    grid = visual.get("video_grid_thw")
    if pixels.dim() == 2 and grid is not None:
        videos = unpatchify_frames(pixels, grid, *_processor_sizes(video_processor))
    elif pixels.dim() == 5:
        videos = list(pixels)
    else:
        videos = []
    return _per_row(videos, counts.tolist())
