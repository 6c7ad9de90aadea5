"""``examples/hf-processor.yaml`` validates and runs with ``energon-plugins bench`` on generated data.

The data and the tiny processor are written by ``energon_plugin_hf_processor.demo_data`` into
``.cache/hf-processor`` next to a copy of the example, where its relative paths point.
"""

import json
import pathlib
import shutil

import pytest
from energon_plugin_hf_processor.demo_data import prepare

from energon_plugins import run_cli

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "hf-processor.yaml"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-example")
    paths = prepare(root / ".cache" / "hf-processor", num_samples=40)
    assert pathlib.Path(paths["processor"], "processor_config.json").is_file()
    (root / "examples").mkdir()
    return pathlib.Path(shutil.copy(EXAMPLE, root / "examples" / "hf-processor.yaml"))


def test_example_validates_and_benches(example):
    result = run_cli(["validate", str(example)])
    assert result.exit_code == 0, result.output
    assert "task_encoder 'hf-processor'" in result.output
    result = run_cli(["bench", str(example), "--batches", "1", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["samples"] > 4 and figures["loss_tokens"] > 0 and figures["seq_length"] == 1024
