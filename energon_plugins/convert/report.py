"""The report of rejected records: ``rejected.jsonl`` in the output folder, one line each.

Each line is ``{"index": i, "location": "data.json:#12", "id": ..., "reason": "missing_image",
"message": "..."}`` (reasons: :data:`~energon_plugins.convert.records.REASONS`), in input order.
The file only grows; a resumed run truncates it to the checkpoint's offset first, so no record
is reported twice.
"""

import json
import os
import pathlib
from collections import Counter
from typing import Any

REPORT_NAME = "rejected.jsonl"


class RejectReport:
    """Appends rejected records to ``path`` and counts them by reason."""

    def __init__(self, path: pathlib.Path, *, offset: int = 0,
                 counts: dict[str, int] | None = None) -> None:
        self.path = path
        self._file = path.open("r+b" if offset else "wb")
        self._file.truncate(offset)
        self._file.seek(offset)
        self.counts: Counter[str] = Counter(counts or {})

    def add(self, index: int, location: str, reason: str, message: str, ident: Any = None) -> None:
        """Report one record."""
        line = {"index": index, "location": location, "id": ident, "reason": reason,
                "message": message}
        self._file.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
        self.counts[reason] += 1

    def checkpoint(self) -> int:
        """Flush; return the byte offset a resumed run truncates to."""
        self._file.flush()
        os.fsync(self._file.fileno())
        return self._file.tell()

    def close(self) -> None:
        """Flush and close."""
        self._file.close()


def read_report(path: pathlib.Path) -> list[dict[str, Any]]:
    """Every line of a report."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
