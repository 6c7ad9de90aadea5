"""The processor the encoder calls (``fast_calls``): the same outputs as the model's processor.

The five most-trained families' tiny processors (their real processor and image processor
classes), photographs-like and random-pixel images of several sizes and aspect ratios (up- and
downscaled), and the images the fast paths hand back to transformers (another mode, another
keyword argument): every output tensor is equal, bit for bit, to the processor's own.
"""

import pickle

import numpy as np
import pytest
import torch
from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
from energon_plugin_hf_processor.fast_calls import RememberedMerge, calling_processor, int_lists_as_tensors
from energon_plugin_hf_processor.fast_images import FastQwenImages, fast_image_processor
from energon_plugin_hf_processor.options import HFProcessorOptions

from energon_plugins import BuildContext

FAMILIES = ("qwen2.5-vl", "qwen3-vl", "internvl", "gemma3", "llava-onevision")
SIZES = ((20, 20), (333, 517), (640, 360), (97, 1001))


def _images(seed: int) -> list:
    """Random-pixel and smooth (photograph-like) RGB images of :data:`SIZES`."""
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
        out.append(Image.fromarray(pixels))
    return out


def _call(processor, images, **kwargs):
    image_token = getattr(processor, "image_token", "<image>")
    text = "".join(f"{image_token} picture {i}. " for i in range(len(images)))
    return processor(text=[text], images=[images], return_tensors="pt", **kwargs)


def _assert_same(ours, theirs):
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert ours[key].dtype == value.dtype, key
            assert torch.equal(ours[key], value), key
        else:
            assert ours[key] == value, key


@pytest.fixture(scope="module")
def processors(processor_dirs):
    from transformers import AutoProcessor

    return {family: AutoProcessor.from_pretrained(str(processor_dirs[family])) for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_same_outputs_as_the_processor(processors, family):
    processor = processors[family]
    fast = calling_processor(processor)
    assert fast.image_processor is not processor.image_processor  # a faster path is in use
    budget = {"size": {"shortest_edge": 56 * 56, "longest_edge": 448 * 448}} if "qwen" in family else {}
    for seed in range(2):
        images = _images(seed)
        for _ in range(2):  # the second call's keyword arguments are the remembered merge's
            _assert_same(
                _call(fast, images, images_kwargs=dict(budget)),
                _call(processor, images, images_kwargs=dict(budget)),
            )
    assert processor.image_processor is processors[family].image_processor  # the original is left as it was


@pytest.mark.parametrize("family", ("qwen2.5-vl", "internvl"))
def test_images_the_fast_paths_do_not_take_go_to_transformers(processors, family):
    processor = processors[family]
    fast = calling_processor(processor)
    gray = [image.convert("L") for image in _images(3)[:2]]
    rgba = [image.convert("RGBA") for image in _images(4)[:2]]
    for images in (gray, rgba, [np.array(_images(5)[1])]):
        _assert_same(_call(fast, images), _call(processor, images))
    unusual = {"do_normalize": False}  # a keyword argument the Qwen kernel does not read
    _assert_same(_call(fast, gray, images_kwargs=unusual), _call(processor, gray, images_kwargs=unusual))


def test_only_qwen_image_processors_get_the_banded_kernel(processors):
    assert isinstance(fast_image_processor(processors["qwen3-vl"].image_processor), FastQwenImages)
    assert not isinstance(fast_image_processor(processors["gemma3"].image_processor), FastQwenImages)
    assert fast_image_processor(object()) is None


def test_remembered_merge_hands_out_copies(processors):
    processor = processors["qwen2.5-vl"]
    merge = RememberedMerge(processor._merge_kwargs, processor.tokenizer.init_kwargs)
    kwargs = {
        "images_kwargs": {"size": {"shortest_edge": 3136, "longest_edge": 50176}},
        "return_offsets_mapping": True,
    }
    first = merge(tokenizer_init_kwargs=processor.tokenizer.init_kwargs, **kwargs)
    expected = processor._merge_kwargs(tokenizer_init_kwargs=processor.tokenizer.init_kwargs, **kwargs)
    first["text_kwargs"].clear()  # a caller that pops from the result
    again = merge(tokenizer_init_kwargs=processor.tokenizer.init_kwargs, **kwargs)
    assert again == expected and again is not first
    assert len(merge.results) == 1


def test_calling_processor_pickles(processors):
    """Loader workers get the encoder pickled; its calling processor goes with it."""
    fast = calling_processor(processors["llava-onevision"])
    copy = pickle.loads(pickle.dumps(fast))
    images = _images(6)[:2]
    _assert_same(_call(copy, images), _call(processors["llava-onevision"], images))


def test_encoder_samples_equal_the_processor_path(processor_dirs):
    """The encoder through its calling processor and through the processor itself: equal samples."""
    from megatron.energon import VQASample

    options = HFProcessorOptions(processor=str(processor_dirs["qwen2.5-vl"]), max_pixels=200 * 200)
    encoder = HFProcessorTaskEncoder(BuildContext(seq_length=4096), options)
    plain = HFProcessorTaskEncoder(BuildContext(seq_length=4096), options)
    plain.calling_processor = plain.processor
    for i, image in enumerate(_images(7)):
        sample = VQASample(
            __key__=str(i), __restore_key__=(), image=image, context="What is it?", answers=["A photo."]
        )
        ours, theirs = encoder.encode_sample(sample), plain.encode_sample(sample)
        for field in ("input_ids", "labels", "pixel_values", "image_grid_thw"):
            assert torch.equal(getattr(ours, field), getattr(theirs, field)), field


def test_int_lists_become_the_tensors_batch_feature_makes():
    from transformers import BatchFeature

    out = {
        "input_ids": [[5, 7, 9]],
        "offset_mapping": [[(0, 1), (1, 3), (3, 4)]],
        "scores": [[0.5, 1.5]],  # floats: BatchFeature's float32, not numpy's float64
        "text_replacement_offsets": [[(1, 2)], []],  # ragged
        "kept": [[1, 2]],
    }
    skip = ["kept", "text_replacement_offsets"]
    ours = BatchFeature(int_lists_as_tensors(out, skip), tensor_type="pt", skip_tensor_conversion=skip)
    theirs = BatchFeature(dict(out), tensor_type="pt", skip_tensor_conversion=skip)
    _assert_same(ours, theirs)
    assert ours["input_ids"].dtype == torch.int64 and ours["scores"].dtype == torch.float32
    assert ours["kept"] == [[1, 2]]
    assert int_lists_as_tensors(out)["text_replacement_offsets"] == [[(1, 2)], []]  # ragged: left as is
