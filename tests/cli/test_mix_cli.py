"""``bench`` and ``preview`` show a blend's realised mix next to its configured weights.

A real three-leaf blend with nested weights (``tests/_mix_blend.py``): after their own output
both commands print one table naming each leaf with its configured share (nested weights
multiplied) and the shares read; ``bench --json`` holds the same rows under ``mix``. A plain
dataset prints no mix table (and ``mix`` is null).
"""

import json

import pytest
import yaml
from click.testing import CliRunner

from energon_plugins.cli import cli
from energon_plugins.preview.mix_view import MIX_TITLE
from tests._mix_blend import CONFIGURED, write_nested_blend

ENV = {"COLUMNS": "160"}


@pytest.fixture(scope="module")
def write_config(tmp_path_factory, data_root, vqa_dataset, captioning_dataset, interleaved_dataset):
    """``write_config(path)``: a config file for the dataset or metadataset ``path`` (the demo
    tokenizer, 28 px CLIP images, no workers)."""
    from energon_plugins.synthetic import save_demo_tokenizer

    folder = tmp_path_factory.mktemp("mix-cli")
    tokenizer = save_demo_tokenizer(folder / "tokenizer")

    def write(path):
        config = {
            "path": str(path),
            "tokenizer": {"path": str(tokenizer)},
            "seq_length": 256,
            "micro_batch_size": 2,
            "num_workers": 0,
            "shuffle_buffer_size": 10,
            "image_processor": {
                "name": "hf",
                "options": {
                    "class_name": "CLIPImageProcessor",
                    "kwargs": {"size": {"shortest_edge": 28}, "crop_size": {"height": 28, "width": 28}},
                },
            },
        }
        out = folder / f"{path.stem}.config.yaml"
        out.write_text(yaml.safe_dump(config))
        return out

    return write


@pytest.fixture(scope="module")
def blend_config(write_config, data_root):
    return write_config(write_nested_blend(data_root))


def invoke(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True, env=ENV)
    assert result.exit_code == 0, result.output
    return result.output


def mix_lines(output):
    """The lines of the mix table, from its title on."""
    lines = output.splitlines()
    starts = [index for index, line in enumerate(lines) if MIX_TITLE in line]
    assert len(starts) == 1, output
    return lines[starts[0] :]


def assert_names_each_leaf(output):
    table = mix_lines(output)
    for source, share in CONFIGURED.items():
        (row,) = [line for line in table if f" {source} " in line]
        assert f"{share:.1%}" in row, (source, row)


def test_bench_prints_the_mix_after_its_figures(blend_config):
    output = invoke("bench", str(blend_config), "--batches", "5")
    assert output.index("samples/s") < output.index(MIX_TITLE), "after the bench's own table"
    assert_names_each_leaf(output)
    assert "read: 12 samples" in output, "the warm-up batch and 5 timed batches of 2"


def test_bench_json_holds_the_mix(blend_config):
    data = json.loads(invoke("bench", str(blend_config), "--batches", "3", "--json"))
    assert [row["source"] for row in data["mix"]] == list(CONFIGURED)
    assert [row["configured"] for row in data["mix"]] == list(CONFIGURED.values())
    assert sum(row["samples"] for row in data["mix"]) == data["samples"] + 2, "with the warm-up batch"


def test_preview_prints_the_mix_after_its_rows(blend_config):
    output = invoke("preview", str(blend_config), "-n", "2")
    assert output.index("tokens with loss") < output.index(MIX_TITLE), "after the rows"
    assert_names_each_leaf(output)


def test_a_plain_dataset_prints_no_mix(write_config, vqa_dataset):
    config = write_config(vqa_dataset.path)
    assert MIX_TITLE not in invoke("preview", str(config), "-n", "1")
    assert json.loads(invoke("bench", str(config), "--batches", "1", "--json"))["mix"] is None
