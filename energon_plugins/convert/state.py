"""``convert.json`` in the output folder: the settings, the source's fingerprint and progress.

Written (atomically: a temporary file, then a rename) when a run starts, at every checkpoint,
and when it ends (``status: done`` plus the result). ``--resume`` reads it back: the settings
and the source files must be the same, then the shards and the report are cut back to the last
checkpoint and the run goes on from the record after it.
"""

import json
import os
import pathlib
from typing import Any

from energon_plugins.errors import ConvertError

STATE_NAME = "convert.json"
STATE_VERSION = 1


def fingerprint(source: pathlib.Path, files: list[pathlib.Path] | None = None) -> list[list[Any]]:
    """``[relative path, size, mtime_ns]`` of ``source`` (a file), of ``files`` (what the reader
    reads, when it says), or of every file under the folder ``source``."""
    if source.is_file():
        stat = source.stat()
        return [[source.name, stat.st_size, stat.st_mtime_ns]]
    if files is None:
        files = [p for p in source.rglob("*") if p.is_file()]
    rows = []
    for path in sorted(files):
        stat = path.stat()
        rows.append([path.relative_to(source).as_posix(), stat.st_size, stat.st_mtime_ns])
    return rows


def load_state(output: pathlib.Path) -> dict[str, Any] | None:
    """The state in ``output``, or None when there is none.

    Raises:
        ConvertError: the file exists but is not a state this version wrote.
    """
    path = output / STATE_NAME
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConvertError(f"{path}: unreadable ({exc}); start over with --overwrite") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ConvertError(f"{path}: not a convert state of version {STATE_VERSION}")
    return state


def save_state(output: pathlib.Path, state: dict[str, Any]) -> None:
    """Write ``state`` atomically."""
    path = output / STATE_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def check_resumable(state: dict[str, Any], settings: dict[str, Any], prints: list) -> None:
    """Refuse to resume with other settings or a changed source.

    Raises:
        ConvertError: naming each setting that differs, or the source files that changed.
    """
    before = state.get("settings", {})
    changed = [key for key in sorted(set(before) | set(settings)) if before.get(key) != settings.get(key)]
    if changed:
        details = "; ".join(f"{k}: {before.get(k)!r} then, {settings.get(k)!r} now" for k in changed)
        raise ConvertError(f"cannot resume with other settings ({details}); use the same "
                           "arguments, or start over with --overwrite")
    if state.get("fingerprint") != prints:
        old = {row[0]: row for row in state.get("fingerprint", [])}
        new = {row[0]: row for row in prints}
        differ = sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))
        raise ConvertError(
            f"cannot resume: the source changed since the interrupted run ({', '.join(differ[:5])}"
            f"{' ...' if len(differ) > 5 else ''}); start over with --overwrite"
        )
