"""Tests of the ``resize`` processor, built through the registry."""

import numpy as np
import pytest
import torch
from energon_plugin_resize import plugin
from PIL import Image

import energon_plugins


def build(**options):
    """Build ``resize`` with ``options`` from an isolated registry."""
    with energon_plugins.isolated_registry(plugin, entry_points=False):
        return energon_plugins.create("image_processor", "resize", options)


def test_shapes_and_normalization():
    proc = build(size=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    white = Image.new("RGB", (64, 48), (255, 255, 255))
    black = torch.zeros(3, 20, 30)  # Energon's decoded tensors: float CHW in [0, 1]
    out = proc(images=[white, black], return_tensors="pt")["pixel_values"]
    assert out.shape == (2, 3, 32, 32)
    assert torch.allclose(out[0], torch.ones(3, 32, 32), atol=1e-5)  # (1 - .5) / .5
    assert torch.allclose(out[1], -torch.ones(3, 32, 32), atol=1e-5)  # (0 - .5) / .5


def test_uint8_array_input():
    proc = build(size=16)
    array = np.full((10, 12, 3), 128, dtype=np.uint8)
    assert proc(images=[array])["pixel_values"].shape == (1, 3, 16, 16)


def test_bad_options_name_the_field():
    with pytest.raises(energon_plugins.PluginOptionsError, match="options.std"):
        build(std=(0.5, 0.0, 0.5))
