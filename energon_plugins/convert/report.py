"""The report of rejected records: ``rejected.jsonl`` in the output folder, one line each.

Each line is ``{"index": i, "location": "data.json:#12", "id": ..., "reason": "missing_image",
"message": "..."}`` (reasons: :data:`~energon_plugins.convert.records.REASONS`), in input order.
The file only grows; a resumed run truncates it to the checkpoint's offset first, so no record
is reported twice.

:class:`RejectLimit` is ``--max-rejected``: the share (``10%``) or number (``500``) of rejected
records above which a conversion fails instead of writing Energon's index.
"""

import dataclasses
import json
import os
import pathlib
import re
from collections import Counter
from typing import Any

REPORT_NAME = "rejected.jsonl"


class RejectReport:
    """Appends rejected records to ``path`` and counts them by reason."""

    def __init__(self, path: pathlib.Path, *, offset: int = 0, counts: dict[str, int] | None = None) -> None:
        self.path = path
        self._file = path.open("r+b" if offset else "wb")
        self._file.truncate(offset)
        self._file.seek(offset)
        self.counts: Counter[str] = Counter(counts or {})

    @property
    def total(self) -> int:
        """Records reported so far."""
        return sum(self.counts.values())

    def add(self, index: int, location: str, reason: str, message: str, ident: Any = None) -> None:
        """Report one record."""
        line = {"index": index, "location": location, "id": ident, "reason": reason, "message": message}
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

    def abort(self) -> None:
        """Close after a failed write (a full disk): what cannot be flushed is dropped, as a
        resumed run truncates the file to its last checkpoint anyway."""
        try:
            self._file.close()
        except OSError:
            pass


def read_report(
    path: pathlib.Path, reason: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """The lines of a report (only those of ``reason``, at most ``limit``), streamed."""
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(rows) >= limit:
                break
            if line.strip():
                row = json.loads(line)
                if reason is None or row.get("reason") == reason:
                    rows.append(row)
    return rows


@dataclasses.dataclass(frozen=True)
class RejectLimit:
    """At most ``share`` of the records read (0-1), or at most ``count`` records, rejected."""

    share: float | None = None
    count: int | None = None

    def __str__(self) -> str:
        return f"{self.share * 100:g}%" if self.share is not None else str(self.count)

    def exceeded(self, rejected: int, records: int) -> bool:
        """Whether ``rejected`` of ``records`` read is over the limit."""
        if self.count is not None:
            return rejected > self.count
        return rejected > (self.share or 0.0) * records


def parse_reject_limit(value: Any) -> RejectLimit | None:
    """``"10%"`` (a share of the records read), ``"500"`` or ``500`` (a number of records), or
    None (no limit) -> :class:`RejectLimit`.

    Raises:
        ValueError: anything else, e.g. ``0.1`` (write ``10%``) or ``120%``.
    """
    if value is None or isinstance(value, RejectLimit):
        return value
    text = str(value).strip() if not isinstance(value, bool) else ""
    if re.fullmatch(r"\d+", text):
        return RejectLimit(count=int(text))
    match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*%", text)
    if match and float(match.group(1)) <= 100:
        return RejectLimit(share=float(match.group(1)) / 100)
    raise ValueError(
        f"not a limit: {value!r}; give a share of the records read (10%, 100% for "
        "no limit) or a number of records (500)"
    )
