"""Tests of fast-clip / fast-siglip, built through the installed distribution's entry point."""

import io
import json
import math
import subprocess
import sys
import warnings

import numpy as np
import PIL.Image
import pytest
import torch
from energon_plugin_fast_image.pil_resize import resize_batch, vertical_first
from energon_plugin_fast_image.settings import DEFAULTS
from energon_plugin_fast_image.testing import mixed_size_images, natural_image

import energon_plugins
from energon_plugins import PluginLoadError, PluginOptionsError

transformers = pytest.importorskip("transformers")

# One 0-255 level after normalisation is 1/255/std: 0.0146 (CLIP, worst channel), 0.0078 (SigLIP).
TOLERANCE = 0.02
# The torchvision kernel is transformers' default backend's own resize: only float rounding of
# the normalisation differs.
EXACT = 1e-5

KERNELS = {"pillow": "Pil", "torchvision": ""}
"""resize_kernel -> the transformers backend it reproduces (class name suffix)."""


def _hf(family, kernel="pillow", **kwargs):
    name = ("CLIPImageProcessor" if family == "clip" else "SiglipImageProcessor") + KERNELS[kernel]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, name)(**kwargs)


def _hf_pixels(proc, arrays):
    return proc(images=[PIL.Image.fromarray(a) for a in arrays], return_tensors="pt")["pixel_values"]


def test_discovered_through_entry_point():
    rows = {(r.name, r.distribution, r.status) for r in energon_plugins.available("image_processor")}
    assert ("fast-clip", "energon-plugin-fast-image", "ok") in rows
    assert ("fast-siglip", "energon-plugin-fast-image", "ok") in rows
    spec = energon_plugins.resolve("image_processor", "fast-clip")
    assert isinstance(spec.factory, str)  # lazy "module:attr": nothing heavy at listing time


def test_listing_does_not_import_torch():
    code = (
        "import sys, energon_plugins; "
        "names = [r.name for r in energon_plugins.available('image_processor')]; "
        "assert 'fast-clip' in names, names; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_defaults_equal_transformers(family):
    proc = energon_plugins.create("image_processor", f"fast-{family}")
    ref = _hf(family).to_dict()
    for key in ("do_resize", "do_rescale", "do_normalize", "size", "resample"):
        assert getattr(proc, key) == ref[key], key
    assert proc.rescale_factor == pytest.approx(ref["rescale_factor"])
    assert proc.image_mean == pytest.approx(list(ref["image_mean"]))
    assert proc.image_std == pytest.approx(list(ref["image_std"]))
    assert proc.do_center_crop == bool(ref.get("do_center_crop", False))
    assert proc.crop_size == ref.get("crop_size")
    assert set(DEFAULTS[family]) >= {"size", "crop_size", "image_mean", "image_std"}


# (height, width) cases: identity, non-square, down- and up-scaling, extreme aspect ratios.
DOWNSCALE = [(480, 640), (640, 480), (333, 611), (613, 257), (224, 224), (225, 300)]
UPSCALE = [(200, 300), (150, 100), (64, 64), (100, 900), (900, 90), (210, 222)]


def _compare(family, sizes, seed, kernel):
    rng = np.random.default_rng(seed)
    arrays = [natural_image(rng, h, w) for h, w in sizes]
    ref = _hf_pixels(_hf(family, kernel), arrays)
    proc = energon_plugins.create("image_processor", f"fast-{family}", {"resize_kernel": kernel})
    results = {}
    inputs = {
        "pil": [PIL.Image.fromarray(a) for a in arrays],
        "uint8_chw": [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays],
        "uint8_hwc": [torch.from_numpy(a) for a in arrays],
        "float_chw": [torch.from_numpy(a).permute(2, 0, 1).float() / 255 for a in arrays],
        "numpy": arrays,
        "png_bytes": [_encode(a, "PNG") for a in arrays],
    }
    for kind, images in inputs.items():
        out = proc(images=images, return_tensors="pt")["pixel_values"]
        assert out.dtype == torch.float32 and out.shape == ref.shape, kind
        diff = (out - ref).abs()
        results[kind] = [(float(d.max()), float(d.mean())) for d in diff]
    return results


def _encode(array, fmt, **kwargs):
    buf = io.BytesIO()
    PIL.Image.fromarray(array).save(buf, fmt, **kwargs)
    return buf.getvalue()


@pytest.mark.parametrize("family", ["clip", "siglip"])
@pytest.mark.parametrize("sizes, seed", [(DOWNSCALE, 1), (UPSCALE, 2)], ids=["downscale", "upscale"])
def test_pillow_kernel_matches_the_pil_backend_within_tolerance(family, sizes, seed):
    """resize_kernel pillow against transformers' PIL backend: every pixel within 0.02, almost
    all identical (float32 near-ties: a rare level)."""
    for kind, per_image in _compare(family, sizes, seed, "pillow").items():
        for (h, w), (mx, mean) in zip(sizes, per_image):
            assert mx <= TOLERANCE, f"{family} {kind} {h}x{w}: max {mx:.4f}"
            assert mean < 1e-4, f"{family} {kind} {h}x{w}: mean {mean:.6f}"


@pytest.mark.parametrize("family", ["clip", "siglip"])
@pytest.mark.parametrize("sizes, seed", [(DOWNSCALE, 1), (UPSCALE, 2)], ids=["downscale", "upscale"])
def test_default_kernel_equals_the_default_torchvision_backend(family, sizes, seed):
    """The default (torchvision) kernel against transformers' default backend: the same pixels
    from every input type (encoded PNG bytes included)."""
    assert energon_plugins.create("image_processor", f"fast-{family}").resize_kernel == "torchvision"
    for kind, per_image in _compare(family, sizes, seed, "torchvision").items():
        for (h, w), (mx, _) in zip(sizes, per_image):
            assert mx <= EXACT, f"{family} {kind} {h}x{w}: max {mx:.6f}"


@pytest.mark.parametrize("family", ["clip", "siglip"])
@pytest.mark.parametrize("kernel, tolerance", [("pillow", TOLERANCE), ("torchvision", EXACT)])
def test_mixed_sizes_within_tolerance(family, kernel, tolerance):
    """64 images, sides 100-640 (up- and downscaled, both pass orders), batched, against the
    backend each kernel reproduces."""
    arrays = mixed_size_images(64, seed=11, min_side=100, max_side=640)
    proc = energon_plugins.create("image_processor", f"fast-{family}", {"resize_kernel": kernel})
    out = proc(images=[torch.from_numpy(a).permute(2, 0, 1) for a in arrays])["pixel_values"]
    diff = (out - _hf_pixels(_hf(family, kernel), arrays)).abs()
    worst = diff.flatten(1).max(1).values
    assert float(worst.max()) <= tolerance, [
        (a.shape, float(m)) for a, m in zip(arrays, worst) if m > tolerance
    ]
    assert float(diff.mean()) < 1e-5


def test_jpeg_bytes_decode_like_pil_and_draft_mode_stays_close():
    """Encoded JPEGs give the pixels of PIL's decode; jpeg_draft decodes at a reduced scale to
    at least the resize target, within a few levels on average."""
    rng = np.random.default_rng(21)
    arrays = [natural_image(rng, 900, 1300), natural_image(rng, 1100, 700), natural_image(rng, 300, 260)]
    jpegs = [_encode(a, "JPEG", quality=90) for a in arrays]
    decoded = [np.asarray(PIL.Image.open(io.BytesIO(j)).convert("RGB")) for j in jpegs]
    proc = energon_plugins.create("image_processor", "fast-clip")
    assert proc.image_input == "bytes"
    ref = _hf_pixels(_hf("clip", "torchvision"), decoded)
    assert (proc(images=jpegs)["pixel_values"] - ref).abs().max() <= EXACT
    draft = energon_plugins.create("image_processor", "fast-clip", {"jpeg_draft": True})
    out = draft(images=jpegs)["pixel_values"]
    assert out.shape == ref.shape
    diff = (out - ref).abs()
    assert float(diff[:2].mean()) < 0.05 and float(diff[2].max()) <= EXACT  # 300 px: no draft
    assert proc.output_size_for(900, 1300) == (224, 224)


@pytest.mark.parametrize("mode, code", [("bicubic", PIL.Image.BICUBIC), ("bilinear", PIL.Image.BILINEAR)])
def test_resize_equals_pillow_bit_for_bit_in_float64(mode, code):
    """The float64 resize is Pillow's: both pass orders, up/down, non-square, with crop windows."""
    rng = np.random.default_rng(12)
    cases = [
        (37, 250, 224, 224),
        (300, 120, 90, 200),
        (120, 120, 40, 100),
        (64, 64, 224, 224),
        (500, 333, 336, 224),
        (333, 500, 224, 336),
        (90, 900, 224, 2240),
        (250, 20, 13, 17),
    ]
    vertical_first_seen = set()
    for h, w, oh, ow in cases:
        image = natural_image(rng, h, w)
        ref = np.asarray(PIL.Image.fromarray(image).resize((ow, oh), code))
        top, left = int(rng.integers(0, oh // 3 + 1)), int(rng.integers(0, ow // 3 + 1))
        ch, cw = oh - top - int(rng.integers(0, oh // 3 + 1)), ow - left
        batch = torch.from_numpy(image).permute(2, 0, 1)[None]
        out = resize_batch(batch, (oh, ow), (top, left, ch, cw), mode, torch.float64)
        got = out[0].permute(1, 2, 0).numpy()
        assert np.array_equal(got, ref[top : top + ch, left : left + cw]), (h, w, oh, ow)
        vertical_first_seen.add(vertical_first(h, w, oh, ow))
    assert vertical_first_seen == {True, False}


@pytest.mark.parametrize("kernel", ["pillow", "torchvision"])
def test_mixed_batch_shapes_and_order(kernel):
    arrays = mixed_size_images(12, seed=3)
    arrays += [arrays[0].copy(), arrays[1].copy()]  # same sizes: grouped into one interpolate
    proc = energon_plugins.create("image_processor", "fast-clip", {"resize_kernel": kernel})
    batch = proc(images=[torch.from_numpy(a).permute(2, 0, 1) for a in arrays])["pixel_values"]
    assert batch.shape == (14, 3, 224, 224)
    one_by_one = torch.cat([proc(images=[a])["pixel_values"] for a in arrays])
    assert torch.equal(batch, one_by_one)
    ref = _hf_pixels(_hf("clip", kernel), arrays)
    assert (batch - ref).abs().mean() < 1e-3


def test_options_override_sizes_and_expose_attributes():
    proc = energon_plugins.create(
        "image_processor",
        "fast-clip",
        {"size": {"shortest_edge": 336}, "crop_size": 336, "resample": "bilinear"},
    )
    assert proc.crop_size["height"] == 336 and proc.size == {"shortest_edge": 336}
    assert proc.resample == 2
    out = proc(images=[np.zeros((400, 500, 3), np.uint8)])["pixel_values"]
    assert out.shape == (1, 3, 336, 336)
    sig = energon_plugins.create("image_processor", "fast-siglip", {"size": 384})
    assert sig.size == {"height": 384, "width": 384} and sig.output_size == (384, 384)


@pytest.mark.parametrize(
    "options, field",
    [
        ({"image_std": [0.5, 0.0, 0.5]}, "image_std"),
        ({"image_mean": [0.5, 0.5]}, "image_mean"),
        ({"size": {"shortest": 224}}, "size"),
        ({"resample": 1}, "resample"),
        ({"rescale_factor": -1}, "rescale_factor"),
        ({"crop_szie": 224}, "crop_szie"),
        ({"torch_threads": 0}, "torch_threads"),
    ],
)
def test_options_errors_name_the_field(options, field):
    with pytest.raises(PluginOptionsError, match=rf"options\.{field}"):
        energon_plugins.create("image_processor", "fast-clip", options)


def test_unknown_option_suggests_the_right_name():
    with pytest.raises(PluginOptionsError, match="crop_size"):
        energon_plugins.create("image_processor", "fast-clip", {"crop_szie": 224})


def test_reads_settings_from_save_pretrained_directory(tmp_path):
    hf = _hf(
        "clip",
        "torchvision",
        size={"shortest_edge": 256},
        crop_size={"height": 240, "width": 240},
        image_mean=[0.1, 0.2, 0.3],
        image_std=[0.4, 0.5, 0.6],
    )
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "preprocessor_config.json").exists()
    proc = energon_plugins.create("image_processor", "fast-clip", {"path": str(tmp_path)})
    assert proc.size == {"shortest_edge": 256}
    assert proc.crop_size == {"height": 240, "width": 240}
    assert proc.image_mean == pytest.approx([0.1, 0.2, 0.3])
    assert proc.image_std == pytest.approx([0.4, 0.5, 0.6])
    arrays = mixed_size_images(4, seed=4, min_side=300)
    diff = (proc(images=arrays)["pixel_values"] - _hf_pixels(hf, arrays)).abs()
    assert diff.max() <= 1 / 255 / 0.4 + 1e-6 and diff.mean() < 1e-3
    # An explicit option overrides the file.
    proc = energon_plugins.create("image_processor", "fast-clip", {"path": str(tmp_path), "crop_size": 128})
    assert proc.crop_size == {"height": 128, "width": 128}


def test_bad_path_and_bad_file_are_named(tmp_path):
    with pytest.raises(PluginLoadError, match="does-not-exist"):
        energon_plugins.create("image_processor", "fast-clip", {"path": str(tmp_path / "does-not-exist")})
    with pytest.raises(PluginLoadError, match="preprocessor_config.json"):
        energon_plugins.create("image_processor", "fast-clip", {"path": str(tmp_path)})
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_std": [1, 2]}))
    with pytest.raises(PluginLoadError, match="image_std"):
        energon_plugins.create("image_processor", "fast-clip", {"path": str(tmp_path)})


def test_grey_rgba_and_bad_inputs():
    proc = energon_plugins.create("image_processor", "fast-siglip")
    grey = np.full((50, 60), 128, np.uint8)
    rgba = np.full((50, 60, 4), 128, np.uint8)
    out = proc(images=[grey, rgba, PIL.Image.fromarray(grey)], return_tensors="np")["pixel_values"]
    assert out.shape == (3, 3, 224, 224)
    assert math.isclose(float(out.mean()), (128 / 255 - 0.5) / 0.5, abs_tol=1e-5)
    with pytest.raises(TypeError, match=r"images\[1\]"):
        proc(images=[grey, "not an image"])
    with pytest.raises(ValueError, match="return_tensors"):
        proc(images=[grey], return_tensors="tf")


def test_energon_float_and_uint8_decodes_give_identical_output():
    """A float CHW image in [0, 1] (Energon's torchrgb) equals its uint8 source (torchrgb8)."""
    proc = energon_plugins.create("image_processor", "fast-clip")
    assert proc.accepts_energon_images is True
    arrays = mixed_size_images(6, seed=5)
    uint8 = [torch.from_numpy(a).permute(2, 0, 1).contiguous() for a in arrays]
    floats = [t.float() / 255 for t in uint8]
    assert torch.equal(proc(images=floats)["pixel_values"], proc(images=uint8)["pixel_values"])


@pytest.mark.parametrize("kernel", ["pillow", "torchvision"])
def test_crop_larger_than_image_pads_like_transformers(kernel):
    """A crop larger than the resized image zero-pads around it, as each backend does."""
    crop = {"height": 250, "width": 231}
    hf = _hf("clip", kernel, crop_size=crop)
    proc = energon_plugins.create(
        "image_processor", "fast-clip", {"crop_size": crop, "resize_kernel": kernel}
    )
    image = natural_image(np.random.default_rng(6), 224, 224)  # no resize: exact comparison
    ref = _hf_pixels(hf, [image])
    out = proc(images=[image])["pixel_values"]
    assert out.shape == ref.shape == (1, 3, 250, 231)
    assert (out - ref).abs().max() < 1e-5


def test_torch_threads_option_applies_during_call_and_restores():
    before = torch.get_num_threads()
    proc = energon_plugins.create("image_processor", "fast-siglip", {"torch_threads": 1})
    seen = []
    original = proc.process_uint8
    proc.process_uint8 = lambda *a: (seen.append(torch.get_num_threads()), original(*a))[1]
    proc(images=[np.zeros((40, 50, 3), np.uint8)])
    assert seen == [1] and torch.get_num_threads() == before


def test_torch_threads_default_is_one_and_null_leaves_torch_setting():
    assert energon_plugins.create("image_processor", "fast-clip").torch_threads == 1
    assert energon_plugins.create("image_processor", "fast-clip", {"size": 300}).torch_threads == 1
    proc = energon_plugins.create("image_processor", "fast-siglip", {"torch_threads": None})
    assert proc.torch_threads is None


@pytest.mark.parametrize("family", ["clip", "siglip"])
def test_torch_resize_kernel_is_close_and_faster_option(family):
    """resize_kernel: torch keeps within 2 levels (the documented trade-off), same shapes."""
    arrays = mixed_size_images(16, seed=13, min_side=100, max_side=640)
    proc = energon_plugins.create("image_processor", f"fast-{family}", {"resize_kernel": "torch"})
    assert proc.resize_kernel == "torch"
    out = proc(images=[torch.from_numpy(a).permute(2, 0, 1) for a in arrays])["pixel_values"]
    diff = (out - _hf_pixels(_hf(family), arrays)).abs()
    two_levels = 2 / 255 / min(DEFAULTS[family]["image_std"]) + 1e-5
    assert float(diff.max()) <= two_levels and float(diff.mean()) < 1e-3
    with pytest.raises(PluginOptionsError, match="resize_kernel"):
        energon_plugins.create("image_processor", f"fast-{family}", {"resize_kernel": "lanczos"})
