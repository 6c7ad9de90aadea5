"""InternVL's and LLaVA-OneVision's tiled images, the pixels read through Arrow, and the direct
template render: the same outputs as transformers', bit for bit (``fast_tiles``,
``fast_images``, ``labels``).

transformers' own ``GotOcr2ImageProcessor`` (with and without tiles, 1 to 6 tiles, a custom tile
size) and ``LlavaOnevisionImageProcessor`` (several grids, with and without padding) on
random-pixel and smooth images of several sizes and aspect ratios, decoded from JPEG files as
the loader decodes them; and the tiny processors' real chat templates on the conversations the
encoder builds.
"""

import io
import pickle

import numpy as np
import pytest
import torch
from energon_plugin_hf_processor.fast_images import fast_image_processor, pixel_planes
from energon_plugin_hf_processor.fast_tiles import FastAnyResImages, FastTiledImages
from energon_plugin_hf_processor.labels import ChatRenderer

SIZES = ((20, 20), (333, 517), (640, 360), (97, 1001), (448, 448), (1600, 1200))


def _jpeg_images(seed: int) -> list:
    """RGB images of :data:`SIZES` (random pixels and smooth fields), read back from JPEG bytes
    (lazily loaded, as Energon's decoder hands them over)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for i, (width, height) in enumerate(SIZES):
        if i % 2:
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        else:
            ys, xs = np.mgrid[0:height, 0:width]
            field = np.stack([xs * 255 / width, ys * 255 / height, (xs + ys) % 256], axis=-1)
            pixels = np.clip(field + rng.normal(0, 12, field.shape), 0, 255).astype(np.uint8)
        encoded = io.BytesIO()
        Image.fromarray(pixels).save(encoded, format="JPEG", quality=90)
        out.append(Image.open(io.BytesIO(encoded.getvalue())))
    return out


def _got_ocr2(**settings):
    from transformers import GotOcr2ImageProcessor

    return GotOcr2ImageProcessor(**{"size": {"height": 28, "width": 28}, **settings})


def _assert_same(ours, theirs):
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        _assert_equal(ours[key], value, key)


def _assert_equal(ours, theirs, key):
    assert type(ours) is type(theirs), key
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, key
        assert torch.equal(ours, theirs), key
    elif isinstance(theirs, list):
        assert len(ours) == len(theirs), key
        for mine, other in zip(ours, theirs, strict=True):
            _assert_equal(mine, other, key)
    else:
        assert ours == theirs, key


@pytest.mark.parametrize(
    "settings, call",
    [
        ({"crop_to_patches": True, "max_patches": 4}, {}),
        ({"crop_to_patches": True, "max_patches": 6}, {"max_patches": 2}),
        ({"crop_to_patches": True, "max_patches": 12}, {"max_patches": 1}),
        ({"crop_to_patches": True, "min_patches": 2, "max_patches": 6}, {}),
        ({"crop_to_patches": False}, {}),
        ({"crop_to_patches": False, "size": {"height": 32, "width": 48}}, {"crop_to_patches": True}),
    ],
    ids=["tiles", "fewer-tiles", "one-tile", "at-least-two", "no-tiles", "wide-tiles"],
)
def test_tiled_images_equal_transformers(settings, call):
    image_processor = _got_ocr2(**settings)
    fast = pickle.loads(pickle.dumps(fast_image_processor(image_processor)))  # as loader workers get it
    assert isinstance(fast, FastTiledImages)
    images = _jpeg_images(len(settings) + len(call))
    for batch in (
        [images[1]],
        images,
        [images[0], images[2], images[0]],
        [[images[3]], [images[4], images[5]]],
    ):
        _assert_same(
            fast(batch, return_tensors="pt", **call),
            image_processor(batch, return_tensors="pt", **call),
        )


def test_calls_the_tiled_path_does_not_take_go_to_transformers():
    from huggingface_hub.errors import StrictDataclassFieldValidationError

    image_processor = _got_ocr2(crop_to_patches=True, max_patches=4)
    fast = FastTiledImages(image_processor)
    rgb = _jpeg_images(1)[:3]
    for images, call in (
        ([image.convert("RGBA") for image in rgb], {"return_tensors": "pt"}),
        ([np.array(image) for image in rgb], {"return_tensors": "pt"}),
        (rgb, {"return_tensors": "pt", "do_normalize": False}),
        (rgb, {}),  # no tensors asked for: transformers' list of tiles
    ):
        _assert_same(fast(images, **call), image_processor(images, **call))
    with pytest.raises(StrictDataclassFieldValidationError, match="max_patches"):  # transformers' own
        fast(rgb, return_tensors="pt", max_patches=3.0)


def test_only_usual_got_ocr2_processors_get_the_tiled_kernel():
    assert isinstance(fast_image_processor(_got_ocr2()), FastTiledImages)
    assert not isinstance(fast_image_processor(_got_ocr2(do_normalize=False)), FastTiledImages)
    assert not isinstance(fast_image_processor(_got_ocr2(resample=2)), FastTiledImages)
    assert not isinstance(fast_image_processor(_got_ocr2(size={"shortest_edge": 28})), FastTiledImages)


def _llava_onevision(**settings):
    from transformers import LlavaOnevisionImageProcessor

    grid = {
        "size": {"height": 28, "width": 28},
        "image_grid_pinpoints": [[28, 56], [56, 28], [56, 56], [84, 28]],
    }
    return LlavaOnevisionImageProcessor(**{**grid, **settings})


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"do_pad": False},
        {
            "size": {"height": 32, "width": 32},
            "image_grid_pinpoints": [[32, 32], [64, 96], [96, 64], [128, 128]],
        },
    ],
    ids=["tiny", "no-padding", "more-grids"],
)
def test_anyres_images_equal_transformers(settings):
    image_processor = _llava_onevision(**settings)
    fast = pickle.loads(pickle.dumps(fast_image_processor(image_processor)))  # as loader workers get it
    assert isinstance(fast, FastAnyResImages)
    images = _jpeg_images(7 + len(settings))
    for batch in ([[images[1]]], [[image] for image in images], images[2:4], images[5], [[images[0]], []]):
        try:
            theirs = image_processor(batch, return_tensors="pt")
        except ValueError:  # unpadded images of different tile counts: no tensor for either
            with pytest.raises(ValueError, match="pixel_values"):
                fast(batch, return_tensors="pt")
            continue
        _assert_same(fast(batch, return_tensors="pt"), theirs)


def test_calls_the_anyres_path_does_not_take_go_to_transformers():
    image_processor = _llava_onevision()
    fast = FastAnyResImages(image_processor)
    rgb = _jpeg_images(8)[:3]
    for images, call in (
        ([rgb[:2], rgb[2:]], {"return_tensors": "pt"}),  # two images for one text: squared, not cut
        ([[image.convert("L")] for image in rgb], {"return_tensors": "pt"}),
        ([[image] for image in rgb], {"return_tensors": "pt", "do_normalize": False}),
    ):
        _assert_same(fast(images, **call), image_processor(images, **call))
    assert not isinstance(fast_image_processor(_llava_onevision(do_center_crop=True)), FastAnyResImages)
    assert not isinstance(
        fast_image_processor(_llava_onevision(image_grid_pinpoints=[[28, 50]])), FastAnyResImages
    )  # a grid that is not whole tiles: transformers resizes the edge tiles


def test_pixel_planes_hold_the_images_pixels():
    from PIL import Image

    for image in _jpeg_images(2):
        planes = pixel_planes(image)
        assert planes.dtype == torch.uint8 and planes.shape[0] in (3, 4)
        assert np.array_equal(planes[:3].permute(1, 2, 0).numpy(), np.array(image))
    assert pixel_planes(_jpeg_images(2)[1]).shape[0] == 4  # Pillow's four-byte pixels, no copy
    # Rows Pillow does not keep in one block (a large image): copied, three planes, same pixels.
    large = Image.new("RGB", (5000, 4000), (10, 200, 30))
    large.paste((250, 5, 60), (4000, 3000, 4200, 3300))
    planes = pixel_planes(large)
    assert planes.shape == (3, 4000, 5000)
    assert planes[:, 3100, 4100].tolist() == [250, 5, 60] and planes[:, 0, 0].tolist() == [10, 200, 30]


RENDER_FAMILIES = ("qwen2.5-vl", "qwen3-vl", "internvl", "gemma3", "llava-onevision")
MESSAGES = [
    [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    ],
    [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}, {"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "  Hello.  "}]},
        {"role": "user", "content": "And now?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Bye."}]},
    ],
]


@pytest.mark.parametrize("family", RENDER_FAMILIES)
def test_direct_render_equals_transformers(family, processor_dirs):
    from transformers import AutoProcessor
    from transformers.utils.chat_template_utils import render_jinja_template

    processor = AutoProcessor.from_pretrained(str(processor_dirs[family]), local_files_only=True)
    renderer = ChatRenderer(processor, ["<|im_end|>"])
    assert renderer._compile is not None  # the direct path is in use
    renderer = pickle.loads(pickle.dumps(renderer))  # as loader workers get it
    reasoning = {"role": "assistant", "content": "Yes.", "reasoning_content": "Think."}
    for messages in (*MESSAGES, [MESSAGES[0][0], reasoning]):  # reasoning: transformers' own path
        for count in range(1, len(messages) + 1):
            for prompt in (False, True):
                expected, _ = render_jinja_template(
                    conversations=[messages[:count]],
                    chat_template=renderer.template,
                    add_generation_prompt=prompt,
                    **processor.tokenizer.special_tokens_map,
                )
                assert renderer.render(messages[:count], prompt) == expected[0], (family, count, prompt)
