"""``examples/llava.yaml`` validates and runs with ``energon-plugins bench`` on generated data.

The data and tokenizer are written by ``energon_plugin_llava.demo_data`` into ``.cache/llava``
next to a copy of the example, where its relative paths point.
"""

import json
import os
import pathlib
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from energon_plugin_llava.demo_data import prepare

from energon_plugins import run_cli

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "llava.yaml"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("llava-example")
    paths = prepare(root / ".cache" / "llava", num_samples=40)
    assert pathlib.Path(paths["path"], ".nv-meta", "dataset.yaml").is_file()
    (root / "examples").mkdir()
    return pathlib.Path(shutil.copy(EXAMPLE, root / "examples" / "llava.yaml"))


def test_example_validates(example):
    result = run_cli(["validate", str(example)])
    assert result.exit_code == 0, result.output
    assert "task_encoder 'llava'" in result.output and "image_processor 'llava-clip'" in result.output


def test_example_benches(example):
    result = run_cli(["bench", str(example), "--batches", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output[result.output.index("{") :])
    assert figures["samples"] == 8 and figures["loss_tokens"] > 0
    assert figures["seq_length"] == 1024


def test_prepare_reuses_what_is_on_disk(example):
    root = example.parents[1] / ".cache" / "llava"
    stamp = root / "data" / ".nv-meta" / "index.sqlite"
    before = stamp.stat().st_mtime_ns
    prepare(root, num_samples=40)
    assert stamp.stat().st_mtime_ns == before
