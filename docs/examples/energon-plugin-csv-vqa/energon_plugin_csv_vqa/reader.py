"""The ``csv-vqa`` reader: ``scan`` streams the rows, ``load`` reads one row's image."""

import csv
import pathlib
from collections.abc import Iterator
from typing import Any

from energon_plugin_csv_vqa.options import CsvVqaOptions
from energon_plugins import ConvertError, RecordError, SourceRecord
from energon_plugins.convert.formats import image_token_of, read_image_file, source_files


class CsvVqaReader:
    """Rows ``image, question, answer`` -> one user turn (with the image) and the answer."""

    def __init__(self, options: CsvVqaOptions, image_token: str) -> None:
        self.options = options
        self.image_token = image_token

    def scan(self, source: pathlib.Path) -> Iterator[tuple[str, Any]]:
        """``(location, payload)`` per row, streaming; the payload is small and picklable."""
        o = self.options
        for path, label in source_files(source, (".csv",)):
            folder = str(pathlib.Path(o.image_folder or path.parent).resolve())
            with path.open(newline="", encoding="utf-8") as fh:
                rows = csv.DictReader(fh, delimiter=o.delimiter)
                missing = {o.image_column, o.question_column, o.answer_column} - set(rows.fieldnames or ())
                if missing:  # the whole file is unusable: a ConvertError, not a bad record
                    raise ConvertError(f"{path}: no column(s) {sorted(missing)}; header: {rows.fieldnames}")
                for row in rows:
                    yield f"{label}:{rows.line_num}", (row, folder)

    def load(self, payload: Any) -> SourceRecord:
        """The row as a conversation; runs in a worker process."""
        row, folder = payload
        o = self.options
        question, answer = row.get(o.question_column), row.get(o.answer_column)
        if not question or answer is None:
            raise RecordError("malformed", f"the row has no {o.question_column!r} text")
        image = read_image_file(pathlib.Path(folder), row[o.image_column], "image")
        if self.image_token not in question:
            question = f"{self.image_token}\n{question}"
        return SourceRecord(
            turns=[{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
            images=[image],
        )


def build_csv_vqa(options: CsvVqaOptions, context: Any) -> CsvVqaReader:
    """The factory: ``context.sample_config.image_token`` is the placeholder convert expects."""
    return CsvVqaReader(options, image_token_of(context))
