"""Templates of an image-processor plugin: resize, rescale and normalize in torch."""

KIND_TEXT = "image processor"
MODULE = "processor"
MODULE_TEXT = (
    "the image processor, called like a transformers one: "
    '`proc(images=[...], return_tensors="pt")["pixel_values"]`.'
)
FACTORY = "build_image_processor"
CHECK = "check_image_processor"
CONFIG_INTRO = "Select it as the image processor of a datamodule config:"
CONFIG_EXAMPLE = """\
path: /data/my-vqa-dataset
seq_length: 1024
micro_batch_size: 4
tokenizer: {path: /models/my-tokenizer}
image_processor:
  name: ${name}
  options:
    size: 224
task_encoder: {name: multimodal}"""
OPTIONS_TABLE = """\
| option | default | meaning |
| --- | --- | --- |
| `size` | `224` | every image is resized to `size` x `size` pixels |
| `image_mean` | `[0.5, 0.5, 0.5]` | per-channel mean subtracted after rescaling to [0, 1] |
| `image_std` | `[0.5, 0.5, 0.5]` | per-channel standard deviation divided by |"""

OPTIONS = '''\
"""Options of the ``${name}`` image processor (import-light: pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field


class ${class_name}Options(BaseModel):
    """Options of the ``${name}`` image processor."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(default=224, ge=8, description="Output height and width in pixels.")
    image_mean: tuple[float, float, float] = Field(
        default=(0.5, 0.5, 0.5), description="Per-channel mean, after rescaling to [0, 1]."
    )
    image_std: tuple[float, float, float] = Field(
        default=(0.5, 0.5, 0.5), description="Per-channel standard deviation (> 0)."
    )
'''


COMPONENT = '''\
"""The ``${name}`` image processor: resize to a square, rescale to [0, 1], normalize.

Energon decodes images to ``(C, H, W)`` float tensors in [0, 1]; uint8 tensors, numpy arrays
and PIL images are accepted too, as a transformers image processor accepts them.
"""

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ${package}.options import ${class_name}Options


def to_float_chw(image: Any, index: int = 0) -> torch.Tensor:
    """One image as a ``(3, H, W)`` float tensor in [0, 1]."""
    if hasattr(image, "convert"):  # a PIL image
        image = np.array(image.convert("RGB"))
    tensor = torch.as_tensor(image)
    if tensor.dim() == 2:
        tensor = tensor[None]
    if tensor.dim() != 3:
        raise ValueError(f"images[{index}]: expected an image, got shape {tuple(tensor.shape)}")
    if tensor.shape[0] not in (1, 3, 4) and tensor.shape[-1] in (1, 3, 4):
        tensor = tensor.permute(2, 0, 1)  # HWC -> CHW
    floating = tensor.dtype.is_floating_point
    tensor = tensor.float() if floating else tensor.float() / 255.0
    if tensor.shape[0] == 1:
        tensor = tensor.expand(3, -1, -1)
    return tensor[:3]


class ${class_name}ImageProcessor:
    """Resize every image to ``size`` x ``size`` (bilinear, antialiased), then normalize."""

    def __init__(self, options: ${class_name}Options | None = None) -> None:
        self.options = options if options is not None else ${class_name}Options()
        self.size = self.options.size
        self.image_mean = list(self.options.image_mean)
        self.image_std = list(self.options.image_std)

    def __call__(self, images: Any = None, return_tensors: str | None = "pt", **kwargs: Any) -> dict:
        """Process ``images`` (one image or a list) into ``{"pixel_values": (N, 3, S, S)}``."""
        if images is None:
            raise ValueError("${name}: no images given")
        if not isinstance(images, (list, tuple)):
            images = [images]
        size = (self.size, self.size)
        resized = [
            F.interpolate(to_float_chw(img, i)[None], size=size, mode="bilinear",
                          align_corners=False, antialias=True)[0]
            for i, img in enumerate(images)
        ]
        pixels = torch.stack(resized).clamp_(0.0, 1.0)
        mean = torch.tensor(self.image_mean).view(1, 3, 1, 1)
        std = torch.tensor(self.image_std).view(1, 3, 1, 1)
        return {"pixel_values": (pixels - mean) / std}


def build_image_processor(
    options: ${class_name}Options | None, context: Any = None
) -> ${class_name}ImageProcessor:
    """Factory of ``${name}`` (``factory(options, context)``)."""
    return ${class_name}ImageProcessor(options)
'''

TESTS = '''\
"""Tests of ${distribution}: the energon-plugins conformance check, then its own behaviour."""

import torch

import energon_plugins
from energon_plugins.testing import check_image_processor


def test_conforms_to_the_image_processor_contract():
    # registration, options, pixel_values, determinism, mixed sizes, float [0, 1] input
    check_image_processor("${name}")
    check_image_processor("${name}", options={"size": 64})


def test_size_and_normalisation():
    proc = energon_plugins.create("image_processor", "${name}", {"size": 32})
    grey = torch.full((3, 20, 50), 0.75)  # as Energon decodes images: CHW float in [0, 1]
    out = proc(images=[grey, torch.zeros(3, 8, 8)], return_tensors="pt")["pixel_values"]
    assert out.shape == (2, 3, 32, 32)
    assert torch.allclose(out[0], torch.full_like(out[0], (0.75 - 0.5) / 0.5), atol=1e-5)
    assert torch.allclose(out[1], torch.full_like(out[1], -1.0))
'''
