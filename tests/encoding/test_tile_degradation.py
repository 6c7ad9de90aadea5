"""Tiles per image lowered to fit ``seq_length`` (Megatron-LM's degradation rule).

The ``hf`` image processor wraps transformers' ``GotOcr2ImageProcessor`` (InternVL's, tiling
with ``crop_to_patches``) at 28 px tiles, up to 6 per image; a 112x28 image takes 5 tiles (4 and
a thumbnail) at a maximum of 6 or 4, 3 at 2 and 1 at 1. Each tile is 4 image tokens (14 px
patches). The one-image samples are read from a real Energon dataset.
"""

import numpy as np
import pytest
import torch
from megatron.energon import SkipSample
from PIL import Image

import energon_plugins
from energon_plugins import BuildContext, ConfigError, MultiModalSampleConfig
from energon_plugins.errors import PluginOptionsError
from energon_plugins.testing import write_megatron_lm_dataset
from tests._loop_replay import llava_preprocess, mlm_get_batch

TILE_TOKENS = 4
WIDE = Image.fromarray(np.random.default_rng(0).integers(0, 256, (28, 112, 3), dtype=np.uint8))
RECORD = {
    "__key__": "wide",
    "images": [WIDE],
    "context": "What?",
    "choices": ["x", "y"],
    "correct_choice_idx": 0,
}
TEXT_TOKENS = 69  # the rendered multiple-choice sample, its image tag aside


def tiling_processor(**options):
    kwargs = {"crop_to_patches": True, "max_patches": 6, "size": {"height": 28, "width": 28}}
    return energon_plugins.create(
        "image_processor", "hf", {"class_name": "GotOcr2ImageProcessor", "kwargs": kwargs, **options}
    )


@pytest.fixture(scope="module")
def wide_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiles") / "mcq"
    write_megatron_lm_dataset(path, "MultiChoiceVQASample", [RECORD])
    return path


def first_batch(path, tokenizer, processor, seq_length, batch_format):
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path), tokenizer, processor, seq_length=seq_length, micro_batch_size=1, num_workers=0,
        batch_format=batch_format,
    )  # fmt: skip
    return next(dm.train_dataloader())


@pytest.mark.parametrize(
    ("seq_length", "max_tiles", "tiles"),
    [(200, 6, 5), (TEXT_TOKENS + 3 * TILE_TOKENS, 2, 3), (TEXT_TOKENS + 3 * TILE_TOKENS - 1, 1, 1)],
    ids=["fits-with-all", "fits-with-3", "fits-with-1"],
)
def test_a_sample_that_fits_only_with_fewer_tiles_gets_them(
    wide_dataset, tokenizer, seq_length, max_tiles, tiles
):
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    processor = tiling_processor(degrade_tiles=True)
    data = first_batch(wide_dataset, tokenizer, processor, seq_length, "megatron-lm")
    assert data["num_tiles"].tolist() == [tiles]
    direct = processor.processor(images=[WIDE], return_tensors="pt", max_patches=max_tiles)["pixel_values"]
    assert torch.equal(data["imgs"], direct), "the tiles of the lowered maximum"
    # LLaVAModel expands the one image token into num_tiles * img_seq_len embeddings
    tokens, labels, loss_mask, _, _, num_tiles, _ = mlm_get_batch(data, pad_id=tokenizer.pad_token_id)
    ids, _, mask = llava_preprocess(
        tokens, labels, loss_mask, num_tiles, image_token_index=image_id, img_seq_len=TILE_TOKENS
    )
    assert int((ids[0] == -1.0).sum()) == tiles * TILE_TOKENS
    assert int((tokens[0] != tokenizer.pad_token_id).sum()) + tiles * TILE_TOKENS - 1 <= seq_length
    assert bool(mask.any()), "the answer kept its labels"
    own = first_batch(wide_dataset, tokenizer, processor, seq_length, None)
    assert own.image_token_counts.tolist() == [tiles * TILE_TOKENS]
    assert own.visual["num_patches"].tolist() == [tiles]


def test_without_degradation_the_sample_keeps_its_tiles_and_is_skipped(tokenizer):
    from megatron.energon import MultiChoiceVQASample

    sample = MultiChoiceVQASample(
        __key__="wide",
        __restore_key__=(),
        image=WIDE,
        context="What?",
        choices=["x", "y"],
        correct_choice_idx=0,
    )
    context = BuildContext(
        tokenizer=tokenizer,
        image_processor=tiling_processor(),
        sample_config=MultiModalSampleConfig(),
        seq_length=85,
    )
    encoder = energon_plugins.create("task_encoder", "multimodal", context=context)
    with pytest.raises(SkipSample):
        encoder.encode_sample(sample)
    encoder = energon_plugins.create("task_encoder", "multimodal", context=context.replace(seq_length=200))
    assert encoder.encode_sample(sample).image_token_counts == [5 * TILE_TOKENS]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        (
            {"class_name": "CLIPImageProcessor", "degrade_tiles": True},
            ConfigError,
            ["degrade_tiles", "does not tile"],
        ),
        (
            {
                "class_name": "GotOcr2ImageProcessor",
                "kwargs": {"crop_to_patches": True, "max_patches": 5},
                "degrade_tiles": True,
            },
            ConfigError,
            ["tile_degradation", "5 tiles"],
        ),
        (
            {"degrade_tiles": True, "tile_degradation": {4: 6}},
            PluginOptionsError,
            ["tile_degradation", "does not step down"],
        ),
    ],
    ids=["not-tiling", "maximum-not-a-key", "steps-up"],
)
def test_bad_tile_degradation_settings_are_named(options, error, words):
    with pytest.raises(error) as info:
        energon_plugins.create("image_processor", "hf", options)
    for word in words:
        assert word in str(info.value)


def test_a_cut_keeps_the_tiles_of_the_images_it_keeps(tokenizer):
    """Cut after the first image of running text, the sample keeps that image's 5 tiles only."""
    from megatron.energon import SimilarityInterleavedSample

    sample = SimilarityInterleavedSample(
        __key__="two-wide",
        __restore_key__=(),
        images=[WIDE, WIDE.transpose(Image.Transpose.FLIP_LEFT_RIGHT)],
        texts=["A first part of the text. ", "And a second part."],
        matched_text_indices=[0, 1],
    )
    context = BuildContext(
        tokenizer=tokenizer,
        image_processor=tiling_processor(),
        sample_config=MultiModalSampleConfig(),
        seq_length=40,
    )
    encoded = energon_plugins.create("task_encoder", "multimodal", context=context).encode_sample(sample)
    assert encoded.truncated and encoded.num_images == 1
    assert encoded.visual["num_patches"].tolist() == [5] and encoded.image_token_counts == [5 * TILE_TOKENS]
    direct = tiling_processor().processor(images=[WIDE], return_tensors="pt")["pixel_values"]
    assert torch.equal(encoded.pixel_values, direct)
