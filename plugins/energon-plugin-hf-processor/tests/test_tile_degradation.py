"""``degrade_tiles``: a sample that fits only with fewer tiles per image gets them (InternVL).

The tiny InternVL processor tiles at 28 px, up to 4 tiles per image (plus a thumbnail when it
makes more than one), one image token per tile: a 112x28 image takes 5 tiles at a maximum of
4, 3 at 2 and 1 at 1, and the multiple-choice sample around it (Megatron-LM's format) is 93,
91 or 89 tokens long. The sample is read from a real Energon dataset.
"""

import numpy as np
import pytest
import torch
from PIL import Image

import energon_plugins
from energon_plugins.testing import write_megatron_lm_dataset

WIDE = Image.fromarray(np.random.default_rng(0).integers(0, 256, (28, 112, 3), dtype=np.uint8))
RECORD = {
    "__key__": "wide",
    "images": [WIDE],
    "context": "What?",
    "choices": ["x", "y"],
    "correct_choice_idx": 0,
}


@pytest.fixture(scope="module")
def wide_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf-tiles") / "mcq"
    write_megatron_lm_dataset(path, "MultiChoiceVQASample", [RECORD])
    return path


def encoded(path, processor_dir, tokenizer, make_datamodule, seq_length, **options):
    """The first batch (2 rows, padded to the longest) of the datamodule over ``path``."""
    datamodule = make_datamodule(
        path, processor_dir, tokenizer, packed=False, seq_length=seq_length, **options
    )
    return next(datamodule.train_dataloader())


@pytest.mark.parametrize(
    ("seq_length", "max_patches", "tiles"), [(91, 2, 3), (90, 1, 1)], ids=["3-tiles", "1-tile"]
)
def test_a_sample_that_fits_only_with_fewer_tiles_gets_them(
    wide_dataset, processor_dirs, make_datamodule, seq_length, max_patches, tiles
):
    from transformers import AutoProcessor

    directory = processor_dirs["internvl"]
    tokenizer = AutoProcessor.from_pretrained(directory, local_files_only=True).tokenizer
    fitted = encoded(wide_dataset, directory, tokenizer, make_datamodule, seq_length, degrade_tiles=True)
    # a batch of 2 rows: the one sample, twice
    assert fitted.image_token_counts.tolist() == [tiles, tiles] and fitted.pixel_values.shape[0] == 2 * tiles
    assert fitted.attention_mask.sum(dim=1).tolist() == [88 + tiles] * 2  # 88 text tokens, one per tile
    # exactly what the processor gives with that maximum from the start
    lowered = encoded(
        wide_dataset,
        directory,
        tokenizer,
        make_datamodule,
        2048,
        processor_kwargs={"max_patches": max_patches},
    )
    assert torch.equal(fitted.input_ids, lowered.input_ids) and torch.equal(fitted.labels, lowered.labels)
    assert torch.equal(fitted.pixel_values, lowered.pixel_values)


def test_without_degradation_or_room_the_sample_is_skipped(processor_dirs):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from megatron.energon import MultiChoiceVQASample, SkipSample

    sample = MultiChoiceVQASample(
        __key__="wide", __restore_key__=(), image=WIDE, context="What?", choices=["x", "y"]
    )
    directory = str(processor_dirs["internvl"])
    for seq_length, degrade in ((91, False), (88, True)):
        options = HFProcessorOptions(processor=directory, degrade_tiles=degrade)
        encoder = HFProcessorTaskEncoder(energon_plugins.BuildContext(seq_length=seq_length), options)
        with pytest.raises(SkipSample):
            encoder.encode_sample(sample)
        assert encoder.error_counts() == {"too_long": 1}


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("family", "options", "words"),
    [
        ("qwen2-vl", {"degrade_tiles": True}, ["degrade_tiles", "does not tile"]),
        ("internvl", {"degrade_tiles": True, "tile_degradation": {12: 8}}, ["tile_degradation", "4 tiles"]),
        (
            "internvl",
            {"degrade_tiles": True, "tile_degradation": {4: 4}},
            ["tile_degradation", "does not step down"],
        ),
    ],
    ids=["not-tiling", "maximum-not-a-key", "steps-not-down"],
)
def test_bad_tile_degradation_settings_are_named(processor_dirs, family, options, words):
    with pytest.raises(energon_plugins.EnergonPluginsError) as info:
        energon_plugins.create(
            "task_encoder",
            "hf-processor",
            {"processor": str(processor_dirs[family]), **options},
            energon_plugins.BuildContext(seq_length=512),
        )
    for word in words:
        assert word in str(info.value), str(info.value)
