"""Templates of a source-format plugin: JSON Lines of image / question / answer records."""

KIND_TEXT = "source format"
MODULE = "reader"
MODULE_TEXT = (
    "the reader: `scan(source)` streams `(location, payload)` per record, `load(payload)` "
    "returns a `SourceRecord` (turns and original image bytes) or raises `RecordError` for a "
    "record it cannot read."
)
FACTORY = "build_source_format"
CHECK = "check_source_format"
USAGE = """\
Convert data in this layout into a prepared Energon dataset; the options are given with
`-o KEY=VALUE`:

```bash
energon-plugins convert answers.jsonl /data/my-vqa-dataset --from ${name} \\
    -o image_folder=images -o answer_key=answer
```

A record it cannot read (bad JSON, a missing field or image) goes to the report
`rejected.jsonl` in the output folder with its reason and location; the run goes on. The
output is a crude `chatml` dataset: give its folder as `path` in a datamodule config.

The input holds one JSON object per line:

```json
{"image": "images/0001.jpg", "question": "What colour is the car?", "answer": "Red."}
```"""
OPTIONS_TABLE = """\
| option | default | meaning |
| --- | --- | --- |
| `image_folder` | `null` | the folder image paths are relative to; `null`: the JSON Lines file's folder |
| `image_key` | `image` | the field holding the image path |
| `question_key` | `question` | the field holding the question |
| `answer_key` | `answer` | the field holding the answer |"""
CONFIG_INTRO = ""
CONFIG_EXAMPLE = ""

OPTIONS = '''\
"""Options of the ``${name}`` source format (import-light: pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field


class ${class_name}Options(BaseModel):
    """Options of the ``${name}`` source format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_folder: str | None = Field(
        default=None,
        description="The folder image paths are relative to; None: the JSON Lines file's folder.",
    )
    image_key: str = Field(default="image", min_length=1, description="The image path field.")
    question_key: str = Field(default="question", min_length=1, description="The question field.")
    answer_key: str = Field(default="answer", min_length=1, description="The answer field.")
'''


COMPONENT = '''\
"""The ``${name}`` reader: JSON Lines of ``{image, question, answer}`` -> one-turn VQA records.

``scan`` runs in the converting process and streams the lines (a file, or every ``.jsonl``
file of a folder in sorted order); ``load`` runs in a worker process and reads one record's
image. A record it cannot read raises ``RecordError``: it goes to the report, the run goes on.
"""

import json
import pathlib
from collections.abc import Iterator
from typing import Any

from energon_plugins import RecordError, SourceRecord
from energon_plugins.convert.formats import image_token_of, read_image_file, source_files

from ${package}.options import ${class_name}Options


class ${class_name}Reader:
    """One user turn (the image placeholder, then the question) and the answer per line."""

    def __init__(self, options: ${class_name}Options | None = None,
                 image_token: str = "<image>") -> None:
        self.options = options if options is not None else ${class_name}Options()
        self.image_token = image_token

    def scan(self, source: pathlib.Path) -> Iterator[tuple[str, Any]]:
        """``(location, (line, image folder))`` per non-empty line, streaming, in file order."""
        for path, label in source_files(source, (".jsonl",)):
            folder = str(pathlib.Path(self.options.image_folder or path.parent).resolve())
            with path.open(encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    if line.strip():
                        yield f"{label}:{number}", (line, folder)

    def field(self, record: dict, key: str) -> str:
        """The non-empty text of ``record[key]``, or a ``malformed`` RecordError naming it."""
        value = record.get(key)
        if not isinstance(value, str) or not value.strip():
            raise RecordError("malformed", f"field {key!r} is missing or not a non-empty string")
        return value

    def load(self, payload: Any) -> SourceRecord:
        """The record of one line; raises ``RecordError`` for a line it cannot read."""
        line, folder = payload
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RecordError("malformed", f"the line is not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise RecordError("malformed", f"the line holds a {type(record).__name__}, not an object")
        o = self.options
        question = self.field(record, o.question_key)
        answer = self.field(record, o.answer_key)
        image = read_image_file(pathlib.Path(folder), self.field(record, o.image_key), o.image_key)
        if self.image_token not in question:
            question = f"{self.image_token}\\n{question}"
        return SourceRecord(
            turns=[{"role": "user", "content": question},
                   {"role": "assistant", "content": answer}],
            images=[image],
            id=record.get("id") if isinstance(record.get("id"), str) else None,
        )


def build_source_format(options: ${class_name}Options | None, context: Any = None) -> ${class_name}Reader:
    """Factory of ``${name}``; ``context.sample_config.image_token`` is convert's placeholder."""
    return ${class_name}Reader(options, image_token_of(context))
'''

TESTS = '''\
"""Tests of ${distribution}: the energon-plugins conformance check, then its own behaviour."""

import json

import pytest
from PIL import Image

import energon_plugins
from energon_plugins.testing import check_source_format


@pytest.fixture
def source(tmp_path):
    """``answers.jsonl``: three good records, one without its image, one that is not JSON."""
    lines = []
    for i in range(3):
        Image.new("RGB", (16 + i, 12), (70 * i, 90, 30)).save(tmp_path / f"p{i}.png")
        lines.append(json.dumps({"image": f"p{i}.png", "question": f"Which colour is {i}?",
                                 "answer": f"Colour {i}."}))
    lines.insert(1, json.dumps({"image": "gone.png", "question": "Where?", "answer": "Nowhere."}))
    lines.append("{not json")
    (tmp_path / "answers.jsonl").write_text("\\n".join(lines) + "\\n")
    return tmp_path / "answers.jsonl"


def test_conforms_to_the_source_format_contract(source):
    # registration, options, scan streams (location, payload), load returns SourceRecords and
    # rejects bad records with RecordError, and the converted dataset reads back through
    # Energon's own loader with the same conversations and images
    result = check_source_format("${name}", source, rejects=2)
    assert result.written == {"train": 3}


def test_records_and_rejects(source, tmp_path):
    result = energon_plugins.convert_dataset(
        source, tmp_path / "out", "${name}", split_ratio="train=1", workers=0
    )
    assert result.written == {"train": 3}
    assert result.rejected == {"missing_image": 1, "malformed": 1}
    report = [json.loads(line) for line in result.report.read_text().splitlines()]
    assert [row["location"] for row in report] == ["answers.jsonl:2", "answers.jsonl:5"]
'''
