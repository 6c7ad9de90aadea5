"""The quickstart's LLaVA config (``task_encoder: {name: llava}``, no ``image_processor``) on a
model directory holding LLaVA-1.5's 336 px CLIP ``preprocessor_config.json``: the encoder gets
that processor (576 tokens per image, not 224 px and 256), ``validate`` says so, and a fixed
``image_tokens: 256`` against it is an error naming both fields.

The model directory is written offline: the LLaVA demo tokenizer and transformers'
``CLIPImageProcessor(...).save_pretrained``; the data is a real crude ``llava`` dataset.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import yaml

from energon_plugins import build_datamodule, run_cli
from energon_plugins.testing import save_demo_tokenizer, write_dataset


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    import transformers

    root = tmp_path_factory.mktemp("llava-model-dir")
    model = save_demo_tokenizer(root / "llava-1.5", family="llava")
    transformers.CLIPImageProcessor(
        size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
    ).save_pretrained(model)
    write_dataset(
        root / "data", kind="llava", num_samples=16, samples_per_shard=4, image_size=((24, 24), (64, 48))
    )
    return root


def config(site, name, **values):
    """The quickstart's config: a dataset, the model directory as tokenizer, the llava encoder."""
    data = {
        "path": "data",
        "tokenizer": {"path": "llava-1.5"},
        "seq_length": 2048,
        "num_workers": 0,
        "task_encoder": {"name": "llava"},
    }
    data.update(values)
    path = site / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_llava_encoder_takes_the_336_px_processor_of_the_model_directory(site):
    dm = build_datamodule(config(site, "quickstart"))
    encoder = dm.task_encoder
    assert dm.image_processor_source == f"hf from {(site / 'llava-1.5').resolve()}"
    assert encoder.image_processor is dm.image_processor
    assert encoder.image_processor.crop_size.height == 336
    assert encoder.tokens_per_image == 576  # (336 / 14) ** 2, not 224 px's 256


def test_validate_names_the_processor_and_refuses_a_mismatched_token_count(site):
    result = run_cli(["validate", str(config(site, "names"))])
    assert result.exit_code == 0, result.output
    model = (site / "llava-1.5").resolve()
    assert f"image processor: hf from {model} (CLIPImageProcessor, 336x336)" in result.output
    bad = config(site, "mismatch", task_encoder={"name": "llava", "options": {"image_tokens": 256}})
    result = run_cli(["validate", str(bad)])
    assert result.exit_code == 1, result.output
    line = next(
        line
        for line in result.output.splitlines()
        if line.strip().startswith("task_encoder.options.image_tokens:")
    )
    assert "256" in line and "576" in line and "image_processor" in line
