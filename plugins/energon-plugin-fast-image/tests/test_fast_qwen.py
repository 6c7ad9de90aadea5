"""Tests of fast-qwen2-vl against transformers' Qwen2-VL image processor (default backend)."""

import io
import random
import warnings

import numpy as np
import PIL.Image
import pytest
import torch
from energon_plugin_fast_image.qwen_settings import PRESETS, smart_resize
from energon_plugin_fast_image.testing import natural_image

import energon_plugins
from energon_plugins import PluginOptionsError

transformers = pytest.importorskip("transformers")
from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
    smart_resize as hf_smart_resize,
)

TOLERANCE = 0.02  # the goal; the resize is transformers' own kernel, so the figure is ~1e-6


def _hf(model="qwen2-vl", **kwargs):
    preset = PRESETS[model]
    settings = {
        key: preset[key]
        for key in ("patch_size", "temporal_patch_size", "merge_size", "min_pixels", "max_pixels")
    }
    settings.update(image_mean=list(preset["image_mean"]), image_std=list(preset["image_std"]))
    settings.update(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.Qwen2VLImageProcessor(**settings)


def _jpeg(array):
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_smart_resize_equals_transformers(model):
    """The resize targets (so the grids) of 3,000 seeded sizes, tiny to huge, are transformers'."""
    preset = PRESETS[model]
    factor = preset["patch_size"] * preset["merge_size"]
    rng = random.Random(7)
    for _ in range(3000):
        h, w = rng.randint(4, 6000), rng.randint(4, 6000)
        if max(h, w) / min(h, w) > 200:
            continue
        args = (h, w, factor, preset["min_pixels"], preset["max_pixels"])
        assert smart_resize(*args) == hf_smart_resize(
            h, w, factor=factor, min_pixels=args[3], max_pixels=args[4]
        ), (h, w)
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 3000, factor, preset["min_pixels"], preset["max_pixels"])


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen3-vl"])
def test_pixels_and_grids_match_transformers(model):
    """224-1600 px, up- and downscaled, every input form: identical grids, pixels within 0.02
    (in fact float rounding only) of Qwen2VLImageProcessor with the same settings."""
    rng = np.random.default_rng(3)
    arrays = [natural_image(rng, h, w) for h, w in ((224, 224), (333, 500), (900, 640), (1200, 1600))]
    ref = _hf(model)(images=[PIL.Image.fromarray(a) for a in arrays], return_tensors="pt")
    proc = energon_plugins.create("image_processor", "fast-qwen2-vl", {"model": model})
    assert proc.patch_size == PRESETS[model]["patch_size"] and proc.merge_size == 2
    forms = {
        "numpy": arrays,
        "pil": [PIL.Image.fromarray(a) for a in arrays],
        "uint8_chw": [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays],
        "float_chw": [torch.from_numpy(a).permute(2, 0, 1).float() / 255 for a in arrays],
    }
    for form, images in forms.items():
        out = proc(images=images)
        assert torch.equal(out["image_grid_thw"], ref["image_grid_thw"]), form
        assert out["pixel_values"].shape == ref["pixel_values"].shape, form
        assert float((out["pixel_values"] - ref["pixel_values"]).abs().max()) <= 1e-5, form
    grids = [proc.grid_for(*a.shape[:2]) for a in arrays]
    assert torch.equal(torch.tensor(grids), ref["image_grid_thw"])  # known before decoding


def test_encoded_jpegs_equal_their_decoded_pixels_and_draft_stays_close():
    rng = np.random.default_rng(4)
    arrays = [natural_image(rng, 1500, 1100), natural_image(rng, 300, 420)]
    jpegs = [_jpeg(a) for a in arrays]
    decoded = [PIL.Image.open(io.BytesIO(j)).convert("RGB") for j in jpegs]
    small = {"min_pixels": 56 * 56, "max_pixels": 28 * 28 * 128}  # big images shrink 4x+
    ref = _hf(**small)(images=decoded, return_tensors="pt")
    out = energon_plugins.create("image_processor", "fast-qwen2-vl", small)(images=jpegs)
    assert torch.equal(out["image_grid_thw"], ref["image_grid_thw"])
    assert float((out["pixel_values"] - ref["pixel_values"]).abs().max()) <= 1e-5
    draft = energon_plugins.create("image_processor", "fast-qwen2-vl", {**small, "jpeg_draft": True})
    got = draft(images=jpegs)
    assert torch.equal(got["image_grid_thw"], ref["image_grid_thw"])
    assert float((got["pixel_values"] - ref["pixel_values"]).abs().mean()) < 0.05


def test_reads_a_saved_preprocessor_config_and_options_win(tmp_path):
    _hf("qwen3-vl", min_pixels=32 * 32 * 8, max_pixels=32 * 32 * 64).save_pretrained(tmp_path)
    proc = energon_plugins.create("image_processor", "fast-qwen2-vl", {"path": str(tmp_path)})
    assert (proc.patch_size, proc.min_pixels, proc.max_pixels) == (16, 32 * 32 * 8, 32 * 32 * 64)
    assert proc.image_mean == pytest.approx([0.5, 0.5, 0.5])
    proc = energon_plugins.create(
        "image_processor", "fast-qwen2-vl", {"path": str(tmp_path), "max_pixels": 32 * 32 * 16}
    )
    assert proc.max_pixels == 32 * 32 * 16 and proc.size["longest_edge"] == 32 * 32 * 16


@pytest.mark.parametrize(
    "options, field",
    [
        ({"min_pixels": 0}, "min_pixels"),
        ({"image_std": [1, 0, 1]}, "image_std"),
        ({"model": "qwen4-vl"}, "model"),
        ({"max_pixel": 10}, "max_pixel"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(PluginOptionsError, match=field):
        energon_plugins.create("image_processor", "fast-qwen2-vl", options)
    with pytest.raises(PluginOptionsError, match="must not exceed"):
        energon_plugins.create("image_processor", "fast-qwen2-vl", {"min_pixels": 10, "max_pixels": 5})


def test_drives_the_qwen2_vl_task_encoder_with_packing(tmp_path):
    """Through the datamodule with packing: tokens equal those of the transformers-backed
    ``qwen2-vl`` processor, grids identical, pixels within 0.02."""
    pytest.importorskip("energon_plugin_qwen_vl")
    from energon_plugins.testing import build_demo_tokenizer, write_dataset

    info = write_dataset(
        tmp_path / "chatml",
        kind="chatml",
        num_samples=12,
        samples_per_shard=4,
        image_size=((40, 30), (200, 150)),
        seed=5,
        split_ratio=(("train", 1.0),),
    )
    tok = build_demo_tokenizer("qwen2")
    pixels = {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 24}

    def first_batches(name):
        proc = energon_plugins.create("image_processor", name, pixels)
        dm = energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            proc,
            seq_length=1024,
            micro_batch_size=1,
            num_workers=0,
            shuffle_buffer_size=None,
            packing_buffer_size=6,
            packing=energon_plugins.create("packing_strategy", "first-fit-decreasing"),
            task_encoder={"name": "qwen2-vl", "options": {"padding": "longest"}},
            batch_format=None,  # the encoder's packed batch, compared field by field
        )
        loader = iter(dm.train_dataloader())
        return [next(loader) for _ in range(3)]

    for fast, ref in zip(first_batches("fast-qwen2-vl"), first_batches("qwen2-vl"), strict=True):
        assert fast.__key__ == ref.__key__
        assert torch.equal(fast.input_ids, ref.input_ids)
        assert torch.equal(fast.image_grid_thw, ref.image_grid_thw)
        assert float((fast.pixel_values - ref.pixel_values).abs().max()) <= TOLERANCE
