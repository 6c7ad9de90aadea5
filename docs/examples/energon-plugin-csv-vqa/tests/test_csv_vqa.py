"""Convert a small CSV with this source format, then look at what it wrote."""

import csv
import json
import tarfile

import pytest
from energon_plugin_csv_vqa import plugin
from PIL import Image

import energon_plugins


@pytest.fixture
def source(tmp_path):
    """``answers.csv`` with four good rows and one whose image is missing."""
    rows = []
    for i in range(4):
        Image.new("RGB", (16 + i, 12), (60 * i, 90, 30)).save(tmp_path / f"p{i}.png")
        rows.append({"image": f"p{i}.png", "question": f"Which colour is {i}?", "answer": f"Colour {i}."})
    rows.insert(2, {"image": "gone.png", "question": "Where?", "answer": "Nowhere."})
    with (tmp_path / "answers.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, ["image", "question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    return tmp_path / "answers.csv"


def test_rows_become_samples_and_the_bad_row_is_reported(source, tmp_path):
    with energon_plugins.isolated_registry(plugin, entry_points=False):
        result = energon_plugins.convert_dataset(
            source, tmp_path / "out", "csv-vqa", split_ratio="train=1", workers=0
        )
    assert result.written == {"train": 4}
    assert result.rejected == {"missing_image": 1}
    report = [json.loads(line) for line in result.report.read_text().splitlines()]
    assert report[0]["location"] == "answers.csv:4" and "gone.png" in report[0]["message"]
    with tarfile.open(result.output / result.shards["train"][0]) as tar:
        first = json.loads(tar.extractfile(tar.getmembers()[0]).read())
    assert first["conversations"] == [
        {"from": "human", "value": "<image>\nWhich colour is 0?"},
        {"from": "gpt", "value": "Colour 0."},
    ]
    assert (result.output / ".nv-meta" / "dataset.yaml").is_file()  # Energon's index is there


def test_a_missing_column_names_the_file(source, tmp_path):
    with energon_plugins.isolated_registry(plugin, entry_points=False):
        with pytest.raises(energon_plugins.ConvertError, match="answers.csv: no column"):
            energon_plugins.convert_dataset(
                source, tmp_path / "out", "csv-vqa", options={"answer_column": "reply"}, workers=0
            )
