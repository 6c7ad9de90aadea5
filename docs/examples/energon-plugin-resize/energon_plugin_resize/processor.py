"""The ``resize`` processor: called like a Hugging Face image processor."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from energon_plugin_resize.options import ResizeOptions


def _to_float_chw(image: Any) -> torch.Tensor:
    """A ``(3, H, W)`` float tensor in [0, 1] from a PIL image, a uint8 array or an Energon tensor."""
    if isinstance(image, torch.Tensor):
        tensor = image
    else:  # PIL image or numpy array (H, W, C)
        if hasattr(image, "convert"):
            image = image.convert("RGB")
        tensor = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)
    if tensor.dtype == torch.uint8:
        tensor = tensor.float() / 255.0  # Energon's default decoder already yields floats in [0, 1]
    if tensor.shape[0] == 1:
        tensor = tensor.expand(3, -1, -1)
    return tensor.float()


class ResizeProcessor:
    """``proc(images=[...], return_tensors="pt") -> {"pixel_values": (N, 3, size, size)}``."""

    def __init__(self, options: ResizeOptions) -> None:
        self.options = options
        self.mean = torch.tensor(options.mean).view(1, 3, 1, 1)
        self.std = torch.tensor(options.std).view(1, 3, 1, 1)

    def __call__(self, images: Sequence[Any], return_tensors: str = "pt", **_: Any) -> dict:
        """Process ``images``; only ``return_tensors="pt"`` is supported."""
        if return_tensors != "pt":
            raise ValueError(f"resize: return_tensors must be 'pt', got {return_tensors!r}")
        size = self.options.size
        resized = [
            F.interpolate(
                _to_float_chw(img)[None],
                size=(size, size),
                mode="bilinear",
                antialias=True,
                align_corners=False,
            )
            for img in images
        ]
        batch = torch.cat(resized) if resized else torch.empty(0, 3, size, size)
        return {"pixel_values": (batch - self.mean) / self.std}


def build_resize(options: ResizeOptions, context) -> ResizeProcessor:
    """Factory: ``factory(options, context) -> processor``."""
    return ResizeProcessor(options)
