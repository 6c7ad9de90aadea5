"""The built-in ``hf`` image processor plugin."""

import io
import tarfile

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

import energon_plugins
from energon_plugins.encoding.image_processors.hf import (
    HFImageProcessor,
    energon_image_to_pil,
    wrap_image_processor,
)
from energon_plugins.encoding.image_processors.options import HFImageProcessorOptions
from energon_plugins.errors import ConfigError, PluginLoadError, PluginOptionsError


def _png_images(info, n=3):
    out = []
    for shard in info.shards:
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".png"):
                    out.append(Image.open(io.BytesIO(tar.extractfile(member).read())).convert("RGB"))
                    if len(out) == n:
                        return out
    return out


def _as_energon(img):
    """What Energon's default decoder yields for an 8-bit RGB image: CHW float in [0, 1]."""
    return torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float() / 255.0


def _build(options=None):
    try:
        return energon_plugins.create("image_processor", "hf", options)
    except PluginLoadError as exc:  # the registry wraps factory errors; keep the cause visible
        raise exc.__cause__ if exc.__cause__ is not None else exc


def test_default_is_a_clip_processor():
    proc = _build()
    assert isinstance(proc, HFImageProcessor)
    assert "CLIPImageProcessor" in type(proc.processor).__name__
    assert proc.size == proc.processor.size  # attributes fall through


def test_energon_tensors_give_what_the_processor_gives_on_the_png(vqa_dataset, clip_processor):
    proc = _build({"class_name": type(clip_processor).__name__})
    images = _png_images(vqa_dataset)
    ours = proc(images=[_as_energon(img) for img in images], return_tensors="pt")["pixel_values"]
    direct = clip_processor(images=images, return_tensors="pt")["pixel_values"]
    assert ours.shape == (len(images), 3, 224, 224)
    assert torch.equal(ours, direct)
    # The trap this avoids: the raw processor rescales [0, 1] floats by 1/255 again.
    raw = clip_processor(images=[_as_energon(images[0])], return_tensors="pt")["pixel_values"]
    assert not torch.allclose(raw[0], direct[0], atol=1e-2)


def test_energon_image_to_pil_round_trips_8_bit_images(vqa_dataset):
    img = _png_images(vqa_dataset, 1)[0]
    back = energon_image_to_pil(_as_energon(img))
    assert np.array_equal(np.asarray(back), np.asarray(img))
    grey = energon_image_to_pil(torch.full((1, 4, 5), 0.5))
    assert grey.mode == "RGB" and grey.size == (5, 4)
    with pytest.raises(ValueError, match="channels"):
        energon_image_to_pil(torch.zeros(2, 4, 4))


def test_kwargs_reach_the_class():
    proc = _build(
        {
            "class_name": "CLIPImageProcessorPil",
            "kwargs": {"crop_size": {"height": 64, "width": 64}, "size": {"shortest_edge": 64}},
        }
    )
    out = proc(images=[torch.rand(3, 32, 48)], return_tensors="pt")
    assert out["pixel_values"].shape == (1, 3, 64, 64)


def test_from_a_local_directory(tmp_path, clip_processor):
    clip_processor.__class__(
        size={"shortest_edge": 96}, crop_size={"height": 96, "width": 96}
    ).save_pretrained(tmp_path)
    proc = _build({"path": str(tmp_path)})
    out = proc(images=[torch.rand(3, 40, 40)], return_tensors="pt")
    assert out["pixel_values"].shape == (1, 3, 96, 96)


def test_missing_directory_and_unknown_class_are_named(tmp_path):
    with pytest.raises(ConfigError, match="is not a directory"):
        _build({"path": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="no preprocessor_config.json"):
        _build({"path": str(tmp_path)})
    with pytest.raises(ConfigError, match="Did you mean: CLIPImageProcessor"):
        _build({"class_name": "CLIPImageProcesor"})
    with pytest.raises(ConfigError, match="'crop_sise' \\(did you mean 'crop_size'\\?\\)"):
        _build({"class_name": "CLIPImageProcessorPil", "kwargs": {"crop_sise": 1}})
    # A class whose kwargs annotations name torch types get_type_hints cannot resolve.
    with pytest.raises(ConfigError, match="'max_pixel' \\(did you mean 'max_pixels'\\?\\)"):
        _build({"class_name": "Qwen2VLImageProcessorPil", "kwargs": {"max_pixel": 1}})


def test_options_are_validated_before_building():
    with pytest.raises(PluginOptionsError, match="trust_remote_code"):
        energon_plugins.create("image_processor", "hf", {"trust_remote_code": "maybe"})
    with pytest.raises(PluginOptionsError, match="path"):
        energon_plugins.create("image_processor", "hf", {"path": "/x", "class_name": "CLIPImageProcessor"})
    assert HFImageProcessorOptions().trust_remote_code is False, "remote code stays off by default"


def test_wrapping_is_idempotent_and_leaves_other_callables(clip_processor):
    wrapped = wrap_image_processor(clip_processor)
    assert isinstance(wrapped, HFImageProcessor)
    assert wrap_image_processor(wrapped) is wrapped

    def plugin_proc(images, return_tensors="pt"):
        return {"pixel_values": torch.stack(images)}

    assert wrap_image_processor(plugin_proc) is plugin_proc
    assert isinstance(transformers.CLIPImageProcessor, type)
