"""``convert.json`` in the output folder: the settings, the source's fingerprint and progress.

Written (atomically: a temporary file, then a rename) when a run starts, at every checkpoint,
and when it ends (``status: done`` plus the result). ``--resume`` reads it back: the settings
and the source files must be the same, then the shards and the report are cut back to the last
checkpoint and the run goes on from the record after it.

A source file's fingerprint is ``[relative path, size, mtime_ns, sha256]``. A resumed run
compares sizes and modification times first; only a file whose size is the same but whose
time changed (a ``touch``, a copy that kept the bytes) is hashed again, so resuming on an
unchanged source reads nothing, and a touched one is accepted when its bytes are the same.
"""

import hashlib
import json
import os
import pathlib
from typing import Any

from energon_plugins.errors import ConvertError

STATE_NAME = "convert.json"
STATE_VERSION = 1
HASH = "sha256"


def source_paths(
    source: pathlib.Path, files: list[pathlib.Path] | None = None
) -> list[tuple[str, pathlib.Path]]:
    """``(relative name, path)`` of what the fingerprint covers: ``source`` (a file), ``files``
    (what the reader reads, when it says), or every file under the folder ``source``."""
    if source.is_file():
        return [(source.name, source)]
    if files is None:
        files = [p for p in source.rglob("*") if p.is_file()]
    return [(path.relative_to(source).as_posix(), path) for path in sorted(files)]


def content_hash(path: pathlib.Path) -> str:
    """The file's SHA-256, read in chunks (memory flat in the file's size)."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, HASH).hexdigest()


def fingerprint(
    source: pathlib.Path, files: list[pathlib.Path] | None = None, *, hashes: bool = True
) -> list[list[Any]]:
    """``[relative path, size, mtime_ns, sha256]`` per source file (see :func:`source_paths`);
    without ``hashes`` the rows stop after the time."""
    rows = []
    for name, path in source_paths(source, files):
        stat = path.stat()
        rows.append([name, stat.st_size, stat.st_mtime_ns] + ([content_hash(path)] if hashes else []))
    return rows


def load_state(output: pathlib.Path) -> dict[str, Any] | None:
    """The state in ``output``, or None when there is none.

    Raises:
        ConvertError: the file exists but is not a state this version wrote.
    """
    path = output / STATE_NAME
    if not path.is_file():
        return None
    return parse_state(path.read_bytes(), str(path))


def parse_state(data: bytes, where: str) -> dict[str, Any]:
    """The state in ``data`` (the bytes of a ``convert.json``; ``where`` names it).

    Raises:
        ConvertError: not a state this version wrote.
    """
    try:
        state = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise ConvertError(f"{where}: unreadable ({exc}); start over with --overwrite") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ConvertError(
            f"{where}: not a convert state of version {STATE_VERSION}; start over with --overwrite"
        )
    return state


def save_state(output: pathlib.Path, state: dict[str, Any]) -> None:
    """Write ``state`` atomically."""
    path = output / STATE_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _same_file(before: list[Any], now: list[Any], path: pathlib.Path) -> tuple[bool, list[Any]]:
    """Whether a file is unchanged, and its row to keep (the new time, the old hash)."""
    if before[:3] == now[:3]:
        return True, before
    if before[1] != now[1] or len(before) < 4:  # another size, or a state without hashes
        return False, now
    return content_hash(path) == before[3], [*now[:3], before[3]]


def check_source(
    state: dict[str, Any], source: pathlib.Path, files: list[pathlib.Path] | None = None
) -> list[list[Any]]:
    """Refuse to resume on a changed source; return the fingerprint to keep in the state.

    Raises:
        ConvertError: naming the files added, removed or changed.
    """
    old = {row[0]: row for row in state.get("fingerprint", [])}
    paths = dict(source_paths(source, files))
    rows, differ = [], []
    for row in fingerprint(source, files, hashes=False):
        same, kept = _same_file(old[row[0]], row, paths[row[0]]) if row[0] in old else (False, row)
        rows.append(kept)
        if not same:
            differ.append(row[0])
    differ = sorted(set(differ) | (set(old) - set(paths)))
    if differ:
        raise ConvertError(
            f"cannot resume: the source changed since the interrupted run ({', '.join(differ[:5])}"
            f"{' ...' if len(differ) > 5 else ''}); start over with --overwrite"
        )
    return rows


def check_resumable(state: dict[str, Any], settings: dict[str, Any]) -> None:
    """Refuse to resume with other settings.

    Raises:
        ConvertError: naming each setting that differs.
    """
    before = state.get("settings", {})
    changed = [key for key in sorted(set(before) | set(settings)) if before.get(key) != settings.get(key)]
    if changed:
        details = "; ".join(f"{k}: {before.get(k)!r} then, {settings.get(k)!r} now" for k in changed)
        raise ConvertError(
            f"cannot resume with other settings ({details}); use the same "
            "arguments, or start over with --overwrite"
        )
