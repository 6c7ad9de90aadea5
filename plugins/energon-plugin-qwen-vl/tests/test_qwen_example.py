"""``examples/qwen2-vl.yaml`` validates and runs with ``energon-plugins bench`` on generated data.

The data and tokenizer are written by ``energon_plugin_qwen_vl.demo_data`` into ``.cache/qwen2-vl``
next to a copy of the example, where its relative paths point.
"""

import json
import os
import pathlib
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from energon_plugin_qwen_vl.demo_data import prepare

from energon_plugins import run_cli

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "qwen2-vl.yaml"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen-example")
    paths = prepare(root / ".cache" / "qwen2-vl", num_samples=40)
    assert pathlib.Path(paths["path"], ".nv-meta", "dataset.yaml").is_file()
    (root / "examples").mkdir()
    return pathlib.Path(shutil.copy(EXAMPLE, root / "examples" / "qwen2-vl.yaml"))


def test_example_validates(example):
    result = run_cli(["validate", str(example)])
    assert result.exit_code == 0, result.output
    assert "task_encoder 'qwen2-vl'" in result.output and "image_processor 'qwen2-vl'" in result.output


def test_example_benches(example):
    result = run_cli(["bench", str(example), "--batches", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output[result.output.index("{") :])
    assert figures["samples"] == 8 and figures["loss_tokens"] > 0
    assert figures["seq_length"] == 1024


def test_prepare_reuses_what_is_on_disk(example):
    root = example.parents[1] / ".cache" / "qwen2-vl"
    stamp = root / "data" / ".nv-meta" / "index.sqlite"
    before = stamp.stat().st_mtime_ns
    prepare(root, num_samples=40)
    assert stamp.stat().st_mtime_ns == before
