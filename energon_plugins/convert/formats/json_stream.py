"""Stream the records of a JSON array file or a JSON Lines file, one at a time, within caps.

A JSON array (``[{...}, {...}]``, LLaVA's layout) is cut into its elements' raw bytes by
:class:`ArrayElements`, which reads the file once in chunks and only follows the structure
(brackets, and strings with their escapes), in time linear in the file's size and in memory
bounded by the record cap; a JSON Lines file is read a line at a time, each line at most the
cap. Each record's bytes are parsed with the standard :mod:`json` module where the record is
loaded (a worker, :func:`decode_payload`), so a broken record is one bad record. A record
larger than ``max_record_bytes`` or nested deeper than ``max_depth`` is a rejected record
(``record_too_large``, ``too_deep``) whose bytes are skipped, never kept.

(A streaming parser is not used for the array: ijson's yajl backend re-lexes a token that
spans its read buffer from the token's start at each new chunk, so a long string takes time
quadratic in its length, 60 s for 128 MB; its pure-Python backend grows the same way; both
build a whole record, and ijson's item prefixes, before any cap could apply.)
"""

import functools
import json
import pathlib
import re
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from energon_plugins.convert.records import RecordError
from energon_plugins.errors import ConvertError

DEFAULT_MAX_RECORD_BYTES = 16 * 2**20
"""The largest record (a JSON array element, or a line) read: 16 MiB."""
DEFAULT_MAX_DEPTH = 64
"""The deepest nesting of a record (the record's own object is level 1)."""

_PEEK = 4096
_CHUNK = 2**20
_BOM = b"\xef\xbb\xbf"
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
_TO_BRACKETS = re.compile(rb'(?:[^\[\]{}"]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")*+([\[{]++|[\]}]++|")', re.DOTALL)
"""Inside a container: everything up to the next run of opening or of closing brackets,
whole strings (with their escapes) skipped in the same step; or up to the opening quote of a
string that does not end in the chunk. Possessive, so a failed match never backtracks."""
_STRING_BODY = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.DOTALL)
"""A string's content up to its closing quote (or a backslash ending the chunk)."""
_SCALAR_END = re.compile(rb"[ \t\r\n,\]]")
_CLOSES = {ord("]"): ord("["), ord("}"): ord("{")}
_FAST_LEVELS = 6
"""Records nested at most this deep (LLaVA's are 3, typed content parts 4) and lying in one
chunk are framed by one match of :func:`_container`."""


@functools.lru_cache(maxsize=8)
def _container(levels: int) -> re.Pattern:
    """A whole object or array nested at most ``levels`` deep, brackets matched by type (one
    C-level match frames a typical record; possessive, so a failed match never backtracks)."""
    items = rb'[^\[\]{}"]++|"[^"\\]*+(?:\\.[^"\\]*+)*+"'
    container = b""
    for _ in range(levels):
        inner = items + (b"|" + container if container else b"")
        container = rb"(?:\{(?:" + inner + rb")*+\}|\[(?:" + inner + rb")*+\])"
    return re.compile(container, re.DOTALL)


def _first_char(path: pathlib.Path) -> str:
    with path.open("rb") as fh:
        while True:
            chunk = fh.read(_PEEK)
            if not chunk:
                return ""
            stripped = chunk.lstrip(b" \t\r\n" + _BOM)  # whitespace and a UTF-8 BOM
            if stripped:
                return chr(stripped[0])


class BrokenArray(Exception):
    """The array cannot be followed any further (the message says why)."""


class ArrayElements:
    """The elements of the JSON array in ``fh``, as payloads for :func:`decode_payload`.

    Iterating gives ``("json", bytes, max_depth)`` per element, or ``("rejected", reason,
    message)`` for one over ``max_record_bytes`` or ``max_depth``. Only the structure is
    followed (brackets matched up to ``max_depth``, strings and escapes, commas between
    elements); whether an element is valid JSON is :func:`decode_payload`'s job.

    Raises:
        BrokenArray: the structure breaks (no ``[``, a bracket closing the wrong one, a missing
            comma, the file ending inside an element or before ``]``).
    """

    def __init__(
        self,
        fh: BinaryIO,
        *,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        chunk: int = _CHUNK,
    ) -> None:
        self.fh = fh
        self.max_record_bytes = max_record_bytes
        self.max_depth = max_depth
        self.chunk = chunk
        self.buf = b""
        self.pos = 0

    def _fill(self) -> bool:
        """The next chunk (``pos`` at its start); False at the end of the file."""
        self.buf = self.fh.read(self.chunk)
        self.pos = 0
        return bool(self.buf)

    def _peek(self) -> int | None:
        """The next byte that is not whitespace (not consumed); None at the end of the file."""
        while True:
            found = _NOT_SPACE.search(self.buf, self.pos)
            if found:
                self.pos = found.start()
                return self.buf[self.pos]
            if not self._fill():
                return None

    def __iter__(self) -> Iterator[tuple]:
        """Each element's payload, in order, reading the file once."""
        self.buf, self.pos = self.fh.read(max(self.chunk, len(_BOM))), 0
        if not self.buf:
            raise BrokenArray("the file is empty")
        if self.buf.startswith(_BOM):
            self.pos = len(_BOM)
        if self._peek() != ord("["):
            raise BrokenArray("the file does not start with '['")
        self.pos += 1
        following = self._peek()
        if following == ord("]"):
            self.pos += 1
        else:
            while True:
                if following is None:
                    raise BrokenArray("the file ends where a record was expected")
                if following in b",]":
                    raise BrokenArray(f"{chr(following)!r} where a record was expected")
                yield self._element()
                following = self._peek()
                if following == ord("]"):
                    self.pos += 1
                    break
                if following != ord(","):
                    raise BrokenArray(
                        "the file ends before the array's ']'"
                        if following is None
                        else f"{chr(following)!r} where ',' or ']' was expected"
                    )
                self.pos += 1
                following = self._peek()
        if self._peek() is not None:
            raise BrokenArray("data after the array's ']'")

    def _element(self) -> tuple:
        """Consume one element (``pos`` at its first byte); its payload."""
        limit, max_depth = self.max_record_bytes, self.max_depth
        whole = _container(min(max_depth, _FAST_LEVELS)).match(self.buf, self.pos)
        if whole is not None:  # the element lies in this chunk and is not too deep
            self.pos, size, deepest = whole.end(), whole.end() - whole.start(), 0
            parts = [whole.group()]
        else:
            parts, size, deepest = self._follow()
        if deepest > max_depth:
            return (
                "rejected",
                "too_deep",
                f"the record is nested {deepest} levels deep, more than max_depth={max_depth}",
            )
        if size > limit:
            return (
                "rejected",
                "record_too_large",
                f"the record is {size} bytes, more than max_record_bytes={limit}",
            )
        return ("json", b"".join(parts), max_depth)

    def _follow(self) -> tuple[list[bytes], int, int]:
        """Consume one element across chunks, following its structure: ``(its bytes in pieces
        (none once over a cap), its size, how deep it nests)``."""
        limit, max_depth = self.max_record_bytes, self.max_depth
        parts: list[bytes] = []
        size = 0
        opened = bytearray()  # the open brackets, as far as max_depth
        depth = deepest = 0
        buf, pos = self.buf, self.pos
        start = pos
        scalar = buf[pos] not in b'[{"'
        in_string = buf[pos] == 0x22
        pos += in_string
        while True:
            if pos >= len(buf):  # the chunk is used up inside the element: read on
                piece = buf[start:]
                size += len(piece)
                if size <= limit and deepest <= max_depth:
                    parts.append(piece)
                else:
                    parts.clear()
                overshoot = pos - len(buf)  # 1 after a backslash that ends the chunk
                if not self._fill():
                    if scalar:  # a bare number or literal ending the file
                        buf, start, pos = self.buf, 0, 0
                        break
                    raise BrokenArray("the file ends inside a record")
                buf, start, pos = self.buf, 0, overshoot
                continue
            if scalar:
                found = _SCALAR_END.search(buf, pos)
                if found is None:
                    pos = len(buf)
                    continue
                pos = found.start()
                break
            if in_string:
                body = _STRING_BODY.match(buf, pos)
                assert body is not None  # the pattern also matches an empty body
                pos = body.end()
                if pos < len(buf):
                    if buf[pos] == 0x5C:  # a backslash ending the chunk: skip what it escapes
                        pos += 2
                        continue
                    pos += 1  # the closing quote
                    in_string = False
                    if depth == 0:
                        break
                continue
            found = _TO_BRACKETS.match(buf, pos)
            if found is None:  # no bracket, nor any string still open, in the rest
                pos = len(buf)
                continue
            pos = found.end()
            run = found.group(1)
            if run == b'"':  # a string that goes on past this chunk
                in_string = True
            elif run[0] in b"[{":
                opened += run[: max(0, max_depth - depth)]
                depth += len(run)
                deepest = max(deepest, depth)
            else:
                closing = min(len(run), depth)
                beyond = min(closing, max(0, depth - max_depth))  # levels not kept in opened
                for byte in run[beyond:closing]:
                    was = opened.pop()
                    if was != _CLOSES[byte]:
                        raise BrokenArray(f"{chr(byte)!r} closes a {chr(was)!r}")
                depth -= closing
                if depth == 0:
                    pos = found.start(1) + closing
                    break
        self.pos = pos
        piece = buf[start:pos]
        size += len(piece)
        if size <= limit and deepest <= max_depth:
            parts.append(piece)
        return parts, size, deepest


def _lines(fh: BinaryIO, max_record_bytes: int) -> Iterator[tuple[int, bytes | int]]:
    """``(line number, line)`` for each line of ``fh``, or ``(line number, its size)`` for a
    line longer than ``max_record_bytes`` (read past in chunks, never held whole)."""
    number = 0
    while True:
        line = fh.readline(max_record_bytes + 2)  # room for the line's own "\r\n"
        if not line:
            return
        number += 1
        size = len(line)
        if not line.endswith(b"\n") and size == max_record_bytes + 2:
            while not line.endswith(b"\n"):
                line = fh.readline(_CHUNK)
                if not line:
                    break
                size += len(line)
            yield number, size
            continue
        if len(line.rstrip(b"\r\n")) > max_record_bytes:
            yield number, size
            continue
        yield number, line


def iter_json_records(
    path: pathlib.Path,
    label: str,
    *,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Iterator[tuple[str, tuple]]:
    """``(location, payload)`` for each record of ``path`` (a JSON array or JSON Lines file);
    decode a payload with :func:`decode_payload`. A record over ``max_record_bytes`` or (in an
    array) ``max_depth`` gets a payload that :func:`decode_payload` rejects, its bytes unread.

    Raises:
        ConvertError: the file is neither a JSON array nor JSON Lines, or the array breaks off
            (the message names the file and the last good record).
    """
    first = _first_char(path)
    if first == "[":
        index = -1
        with path.open("rb") as fh:
            try:
                for index, payload in enumerate(
                    ArrayElements(fh, max_record_bytes=max_record_bytes, max_depth=max_depth)
                ):
                    yield f"{label}:#{index}", payload
            except BrokenArray as exc:
                raise ConvertError(
                    f"{path}: invalid JSON after record #{index} ({exc}); records before it were read"
                ) from None
        return
    if first not in ("{", ""):
        raise ConvertError(f"{path}: not a JSON array or JSON Lines file (it starts with {first!r})")
    checked = False
    with path.open("rb") as fh:
        for number, line in _lines(fh, max_record_bytes):
            if isinstance(line, int):
                yield (
                    f"{label}:{number}",
                    (
                        "rejected",
                        "record_too_large",
                        f"line {number} is {line} bytes, more than max_record_bytes={max_record_bytes}",
                    ),
                )
                continue
            if not line.strip():
                continue
            if not checked:  # a pretty-printed object is not JSON Lines: say so once
                try:
                    json.loads(line)
                except RecursionError:
                    pass  # JSON, too deep: decode_payload says so
                except ValueError:
                    raise ConvertError(
                        f"{path}: line {number} is not a JSON object; expected a JSON array "
                        "or JSON Lines (one record per line)"
                    ) from None
                checked = True
            yield f"{label}:{number}", ("json", line, max_depth)


def nesting_depth(value: Any, stop_after: int | None = None) -> int:
    """How deeply ``value`` nests lists and dicts (a scalar: 0, ``{"a": [1]}``: 2); counting
    stops once it passes ``stop_after``."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if stop_after is not None and deepest > stop_after:
            break
        pending.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def decode_payload(payload: tuple) -> dict:
    """The record (a dict) of a payload from :func:`iter_json_records`.

    Raises:
        RecordError: ``malformed`` (not JSON, or not an object), ``too_deep``,
            ``record_too_large`` (said by the scan).
    """
    kind = payload[0]
    if kind == "rejected":
        raise RecordError(payload[1], payload[2])
    _, data, max_depth = payload
    try:
        record = json.loads(data)
    except RecursionError:
        raise RecordError(
            "too_deep", f"the record is nested more than max_depth={max_depth} levels deep"
        ) from None
    except ValueError as exc:
        raise RecordError("malformed", f"invalid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise RecordError("malformed", f"the record is {type(record).__name__}, not an object")
    depth = nesting_depth(record, stop_after=max_depth)
    if depth > max_depth:
        raise RecordError("too_deep", f"the record is nested more than max_depth={max_depth} levels deep")
    return record
