"""Stream the records of a JSON array file (with ijson) or a JSON Lines file, one at a time.

A JSON array (``[{...}, {...}]``, LLaVA's layout) is parsed incrementally, so memory stays
flat however many records the file holds; a JSON Lines file is read line by line and each line
is parsed where the record is loaded (a worker), so a broken line is one bad record.
"""

import json
import pathlib
from collections.abc import Iterator
from typing import Any

from energon_plugins.convert.records import RecordError
from energon_plugins.errors import ConvertError

_PEEK = 4096


def _first_char(path: pathlib.Path) -> str:
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(_PEEK)
            if not chunk:
                return ""
            stripped = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")  # whitespace and a UTF-8 BOM
            if stripped:
                return chr(stripped[0])


def iter_json_records(path: pathlib.Path, label: str) -> Iterator[tuple[str, tuple[str, Any]]]:
    """``(location, payload)`` for each record of ``path``; decode a payload with
    :func:`decode_payload`.

    Raises:
        ConvertError: the file is neither a JSON array nor JSON Lines, or the array breaks off
            (the message names the file and the last good record).
    """
    first = _first_char(path)
    if first == "[":
        import ijson

        index = -1
        with path.open("rb") as fh:
            try:
                for index, item in enumerate(ijson.items(fh, "item", use_float=True)):
                    yield f"{label}:#{index}", ("object", item)
            except ijson.JSONError as exc:
                raise ConvertError(
                    f"{path}: invalid JSON after record #{index} ({exc}); records before it "
                    "were read"
                ) from None
        return
    if first not in ("{", ""):
        raise ConvertError(f"{path}: not a JSON array or JSON Lines file (it starts with {first!r})")
    checked = False
    with path.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if not checked:  # a pretty-printed object is not JSON Lines: say so once
                try:
                    json.loads(line)
                except ValueError:
                    raise ConvertError(
                        f"{path}: line {number} is not a JSON object; expected a JSON array "
                        "or JSON Lines (one record per line)"
                    ) from None
                checked = True
            yield f"{label}:{number}", ("line", line)


def decode_payload(payload: tuple[str, Any]) -> dict:
    """The record (a dict) of a payload from :func:`iter_json_records`.

    Raises:
        RecordError: ``malformed``: the line is not JSON or the record is not an object.
    """
    kind, data = payload
    if kind == "line":
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise RecordError("malformed", f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecordError("malformed", f"the record is {type(data).__name__}, not an object")
    return data
