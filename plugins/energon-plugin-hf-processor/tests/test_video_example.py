"""``examples/video.yaml`` validates, previews (frame strips) and benches on generated videos."""

import json
import pathlib
import shutil

import pytest
from energon_plugin_hf_processor.demo_data import prepare

from energon_plugins import run_cli

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "video.yaml"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("video-example")
    paths = prepare(root / ".cache" / "video", num_samples=12, video=True)
    assert list(pathlib.Path(paths["path"]).glob("shard-*.tar"))
    (root / "examples").mkdir()
    return pathlib.Path(shutil.copy(EXAMPLE, root / "examples" / "video.yaml"))


def test_video_example_validates_previews_and_benches(example, tmp_path):
    result = run_cli(["validate", str(example)])
    assert result.exit_code == 0, result.output
    page = tmp_path / "video.html"
    result = run_cli(["preview", str(example), "-n", "2", "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert "video 1: " in result.output and "frames drawn" in result.output
    assert page.read_text().count("class='strip'") >= 2
    result = run_cli(["bench", str(example), "--batches", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["samples"] >= 2 and figures["loss_tokens"] > 0
