"""``preview`` draws the images of every pixel layout: patches with grids put back together."""

import numpy as np
import torch

from energon_plugins.preview.images import row_images


class _Batch:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def test_qwen_patches_are_put_back_into_the_image():
    """Qwen2-VL's ``(P, D)`` patches with their grids give back the image it resized."""
    import transformers

    processor = transformers.Qwen2VLImageProcessor(
        min_pixels=28 * 28, max_pixels=28 * 28 * 64, do_normalize=False, do_rescale=False
    )
    rng = np.random.default_rng(0)
    arrays = [
        rng.integers(0, 256, (56, 84, 3), dtype=np.uint8),
        rng.integers(0, 256, (28, 56, 3), dtype=np.uint8),
    ]
    out = processor(images=[torch.from_numpy(a).permute(2, 0, 1) for a in arrays], return_tensors="pt")
    batch = _Batch(
        pixel_values=out["pixel_values"],
        image_grid_thw=out["image_grid_thw"],
        num_images=torch.tensor([1, 1]),
        input_ids=torch.zeros(2, 4),
    )
    rows = row_images(batch, processor)
    assert [len(r) for r in rows] == [1, 1]
    for (image,), array in zip(rows, arrays):
        assert torch.equal(image.round().to(torch.uint8), torch.from_numpy(array).permute(2, 0, 1))


def test_tiles_and_plain_images_go_to_their_rows():
    tiles = torch.rand(3, 5, 3, 8, 8)
    batch = _Batch(
        pixel_values=tiles,
        image_grid_thw=None,
        num_images=torch.tensor([2, 0, 1]),
        input_ids=torch.zeros(3, 4),
    )
    rows = row_images(batch)
    assert [len(r) for r in rows] == [2, 0, 1] and torch.equal(rows[2][0], tiles[2, 0])
