"""What a conversion tells its user beyond the counts: repeated record ids, a reason that
rejected most records, and where missing images probably are.

- :class:`DuplicateIds` counts written records whose id an earlier written record has (the
  samples are keyed by position, so both are written; the count and the first ids go to the
  result). It keeps an 8-byte digest per id (about 80 bytes of memory per written record) and,
  on resume, replays the ids of the samples already in the shards in key order, so a resumed
  run reports exactly what an uninterrupted one would.
- :func:`dominant_reason` and :func:`missing_image_hint`: when most records fail for one
  reason, a warning says so; for ``missing_image`` the missing files are looked for under the
  source's sub-folders (a bounded walk) and the image-folder option that finds them is named.
"""

import ast
import hashlib
import json
import os
import pathlib
import re
import tarfile
from collections import deque
from collections.abc import Iterable
from typing import Any

from energon_plugins.convert.interrupt import raise_if_stopped
from energon_plugins.convert.records import REASONS
from energon_plugins.convert.report import read_report

EXAMPLES = 5
"""Repeated ids named in the result."""
HINT_SAMPLES = 12
"""Missing image paths looked for when a hint is made."""
WALK_FOLDERS = 400
"""At most this many folders under the source are visited for the hint."""
WALK_DEPTH = 4
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
"""A string as ``repr`` writes it: the readers name the missing file's path that way."""


# ----------------------------------------------------------------------------- duplicate ids
class DuplicateIds:
    """Counts records that repeat the id of an earlier written record."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self.count = 0
        self.examples: list[str] = []

    def add(self, ident: str | None) -> None:
        """Note the id of a written record (None: the record has no id)."""
        if ident is None:
            return
        digest = int.from_bytes(
            hashlib.blake2b(ident.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
        )
        if digest in self._seen:
            self.count += 1
            if len(self.examples) < EXAMPLES and ident not in self.examples:
                self.examples.append(ident)
        else:
            self._seen.add(digest)

    def replay(self, shards: Iterable[pathlib.Path]) -> None:
        """Add the ids of the samples in ``shards`` (written before a resume), in key order."""
        ids: list[tuple[str, str | None]] = []
        for path in shards:
            raise_if_stopped()  # reading every earlier shard takes a while on a large resume
            with tarfile.open(path, "r:") as tar:
                for member in tar:
                    key, _, part = member.name.partition(".")
                    data = tar.extractfile(member) if part == "json" else None
                    if data is not None:
                        with data:  # closed here, not by a finalizer that drops a Ctrl-C
                            ids.append((key, json.loads(data.read()).get("id")))
        for _, ident in sorted(ids, key=lambda pair: pair[0]):
            self.add(ident)

    def warning(self) -> str | None:
        """One line about the repeated ids (None when there are none)."""
        if not self.count:
            return None
        shown = ", ".join(repr(ident) for ident in self.examples)
        return (
            f"{self.count} written record(s) repeat the id of an earlier record (e.g. "
            f"{shown}); all were written, as samples are keyed by position, not by id"
        )


# ----------------------------------------------------------------------------- most rejected
def dominant_reason(rejected: dict[str, int], records: int) -> tuple[str, int] | None:
    """``(reason, count)`` when one reason rejected more than half of the records read."""
    if not rejected or not records:
        return None
    reason, count = max(rejected.items(), key=lambda item: item[1])
    return (reason, count) if count * 2 > records else None


def _missing_paths(report: pathlib.Path) -> list[pathlib.Path]:
    """The first image paths that ``missing_image`` rows of the report name."""
    paths = []
    for row in read_report(report, "missing_image", limit=HINT_SAMPLES):
        for quoted in _QUOTED.findall(row.get("message", "")):  # the first absolute path
            try:
                text = ast.literal_eval(quoted)
            except (ValueError, SyntaxError):
                continue
            if isinstance(text, str) and os.path.isabs(text):
                paths.append(pathlib.Path(text))
                break
    return paths


def _folders(root: pathlib.Path, skip: pathlib.Path) -> list[pathlib.Path]:
    """Folders under ``root`` (itself first), breadth first, bounded, not under ``skip``."""
    found: list[pathlib.Path] = []
    queue = deque([(root, 0)])
    while queue and len(found) < WALK_FOLDERS:
        folder, depth = queue.popleft()
        if folder == skip:
            continue
        found.append(folder)
        if depth >= WALK_DEPTH:
            continue
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        queue.extend(
            (pathlib.Path(e.path), depth + 1)
            for e in entries
            if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
        )
    return found


def _candidates(path: pathlib.Path, root: pathlib.Path) -> list[pathlib.PurePath]:
    """The names a missing image may have had in its record, longest first."""
    if path.is_relative_to(root):
        rel = path.relative_to(root)
        return [pathlib.PurePath(*rel.parts[i:]) for i in range(len(rel.parts))]
    parts = path.parts[-3:]
    return [pathlib.PurePath(*parts[i:]) for i in range(len(parts))]


def missing_image_hint(report: pathlib.Path, source: pathlib.Path, output: pathlib.Path) -> str | None:
    """Where the images the report says are missing are found under the source's folder, as a
    sentence naming the ``image_folder`` to pass (None when they are not found)."""
    root = source if source.is_dir() else source.parent
    missing = _missing_paths(report)
    if not missing:
        return None
    names = [_candidates(path, root) for path in missing]
    best: tuple[int, int, pathlib.Path] | None = None
    for folder in _folders(root, output):
        for length in range(4, 0, -1):  # a longer matching name is the likelier one
            hits = sum(
                1
                for candidates in names
                if any(len(c.parts) == length and (folder / c).is_file() for c in candidates)
            )
            if hits and (best is None or (hits, length) > best[:2]):
                best = (hits, length, folder)
    if best is None:
        return None
    hits, _, folder = best
    shown = os.path.relpath(folder)
    shown = str(folder) if shown.startswith("..") else shown
    return (
        f"{hits} of the first {len(missing)} missing images are under {folder}: pass -o image_folder={shown}"
    )


def warnings_for(
    rejected: dict[str, int],
    records: int,
    report: pathlib.Path,
    source: pathlib.Path | None,
    output: pathlib.Path,
    reader: Any,
) -> list[str]:
    """The warnings about rejected records: the dominant reason, with a likely fix."""
    dominant = dominant_reason(rejected, records)
    if dominant is None:
        return []
    reason, count = dominant
    line = (
        f"{count} of {records} records ({100 * count / records:.0f}%) were rejected as "
        f"{reason}: {REASONS.get(reason, 'see the report')}"
    )
    if reason == "missing_image":
        hint = missing_image_hint(report, source, output) if source is not None else None
        if hint and not hasattr(getattr(reader, "options", None), "image_folder"):
            hint = hint.replace("pass -o image_folder=", "point the source format's image folder option at ")
        line += (
            f". {hint}"
            if hint
            else (". Is the image folder right? (-o image_folder=..., relative to the current folder)")
        )
    return [line]
