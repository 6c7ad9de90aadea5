"""The output folder of a conversion: what may be written there, what an earlier run wrote,
and what a full disk means.

A conversion owns only the files it writes: its shards (``SPLIT-NNNNNN.tar`` for the splits its
state names, and the ``.tar.idx`` file Energon's prepare writes beside each), the report (``rejected.jsonl``), the state (``convert.json`` and its temporary
file) and Energon's index files in ``.nv-meta/``. ``--overwrite`` removes exactly those, so a
README or a metadataset YAML a user put beside them stays, and it refuses a source that lies
inside the output folder. A write that fails for lack of space (``ENOSPC``, ``EDQUOT``, or
``EFBIG`` over a file-size limit) becomes one :class:`~energon_plugins.errors.ConvertError`
naming the folder and the error, and saying that ``--resume`` continues after space is freed.
"""

import dataclasses
import errno
import pathlib
import re
import sqlite3
from collections.abc import Callable
from typing import Any

from energon_plugins.convert.report import REPORT_NAME
from energon_plugins.convert.state import STATE_NAME, load_state
from energon_plugins.errors import ConvertError

INDEX_FOLDER = ".nv-meta"
INDEX_FILES = (
    "dataset.yaml",
    "split.yaml",
    ".info.json",
    ".info.yaml",
    "index.sqlite",
    "index.sqlite-journal",
    "index.sqlite-wal",
    "index.sqlite-shm",
    "index.uuid",
)
"""What ``prepare_energon`` writes in ``.nv-meta/`` (Energon's prepare API and ``dataset.yaml``)."""
STATE_TMP = STATE_NAME + ".tmp"
ANY_SPLIT = "[A-Za-z0-9_]+"
"""Split names (used when an unreadable state does not say which splits it had)."""
DISK_FULL = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT", errno.EFBIG: "EFBIG"}


def shard_files(split: str) -> re.Pattern:
    """A split's shards and Energon's ``.tar.idx`` files beside them (and their temporary
    ``.tar.idx.tmp``); ``split`` is a regular expression."""
    return re.compile(rf"^{split}-\d{{6}}\.tar(\.idx(\.tmp)?)?$")


@dataclasses.dataclass
class EarlierFiles:
    """The files of an earlier conversion in an output folder."""

    shards: list[pathlib.Path]
    """The shards and Energon's ``.tar.idx`` files."""
    own: list[pathlib.Path]
    """The report and the state files that exist."""
    index: list[pathlib.Path]
    """Energon's index files in ``.nv-meta/``."""
    others: list[str]
    """Names of everything else in the folder (kept)."""

    def describe(self) -> str:
        """``3 shards, the report and the index`` (what is there to remove)."""
        names = [path.name for path in self.shards + self.own]
        return describe_names(names + [f"{INDEX_FOLDER}/{path.name}" for path in self.index])


def describe_names(names: list[str]) -> str:
    """``3 shards, the report and the index``: what the relative names ``names`` of a
    conversion's files are."""
    tars = sum(1 for name in names if name.endswith(".tar"))
    parts = [f"{tars} shard{'s' if tars != 1 else ''}"]
    if REPORT_NAME in names:
        parts.append("the report")
    if any(name.startswith(f"{INDEX_FOLDER}/") for name in names):
        parts.append("the index")
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def _shard_patterns(state: dict[str, Any] | None) -> list[re.Pattern]:
    splits = [pair[0] for pair in (state or {}).get("settings", {}).get("split_ratio", [])]
    return [shard_files(re.escape(split)) for split in splits] or [shard_files(ANY_SPLIT)]


def earlier_names(names: list[str], state: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """``(the conversion's own names, the others)`` among the relative POSIX names of the files
    of a folder (or the objects under a prefix) whose conversion state is ``state``: what
    ``--overwrite`` removes and what it keeps, as :func:`earlier_files` for a local folder."""
    patterns = _shard_patterns(state)
    own, others = [], []
    for name in sorted(names):
        folder, _, base = name.rpartition("/")
        if (folder == INDEX_FOLDER and base in INDEX_FILES) or (
            not folder
            and (base in (REPORT_NAME, STATE_NAME, STATE_TMP) or any(p.match(base) for p in patterns))
        ):
            own.append(name)
        else:
            others.append(name)
    return own, others


def earlier_files(output: pathlib.Path, state: dict[str, Any] | None) -> EarlierFiles:
    """What the conversion whose state is ``state`` (None: unreadable) wrote in ``output``."""
    patterns = _shard_patterns(state)
    shards, own, others = [], [], []
    for path in sorted(output.iterdir()):
        if path.name == INDEX_FOLDER and path.is_dir():
            continue
        if path.is_file() and any(p.match(path.name) for p in patterns):
            shards.append(path)
        elif path.is_file() and path.name in (REPORT_NAME, STATE_NAME, STATE_TMP):
            own.append(path)
        else:
            others.append(path.name)
    meta = output / INDEX_FOLDER
    index = [meta / name for name in INDEX_FILES if (meta / name).is_file()]
    if meta.is_dir():
        others += [f"{INDEX_FOLDER}/{p.name}" for p in sorted(meta.iterdir()) if p.name not in INDEX_FILES]
    return EarlierFiles(shards, own, index, others)


def remove_index(output: pathlib.Path) -> None:
    """Remove Energon's index files (and ``.nv-meta/`` when nothing else is in it)."""
    meta = output / INDEX_FOLDER
    for name in INDEX_FILES:
        (meta / name).unlink(missing_ok=True)
    if meta.is_dir() and not any(meta.iterdir()):
        meta.rmdir()


def _state_or_none(output: pathlib.Path, overwrite: bool) -> dict[str, Any] | None:
    """The state; with ``overwrite`` an unreadable one is None instead of an error."""
    try:
        return load_state(output)
    except ConvertError:
        if overwrite and (output / STATE_NAME).is_file():
            return None
        raise


def check_output(
    output: pathlib.Path,
    source: pathlib.Path | None,
    *,
    resume: bool,
    overwrite: bool,
    notice: Callable[[str], None],
) -> dict[str, Any] | None:
    """The state to resume from (None: start fresh), after checking the output folder; with
    ``overwrite`` the earlier conversion's files are removed first (``notice`` says which).
    ``source`` is None for a source on object storage (nothing local to compare).

    Raises:
        ConvertError: the output is the source, inside it, or holds it; it is a file; it holds
            other files but no conversion; it holds a conversion and neither ``resume`` nor
            ``overwrite`` is given.
    """
    if source is not None and (output == source or source in output.parents):
        raise ConvertError(f"{output}: the output folder must not be the source or inside it")
    if source is not None and output in source.parents:
        raise ConvertError(
            f"{source}: the source is inside the output folder {output}; "
            "choose another output folder (or move the source out of it)"
        )
    if not output.exists():
        return None
    if not output.is_dir():
        raise ConvertError(f"{output}: exists and is not a folder")
    present = [p for p in output.iterdir() if p.name != STATE_TMP]
    has_state = (output / STATE_NAME).is_file()
    if not present:
        return None
    if not has_state:
        raise ConvertError(
            f"{output}: the folder is not empty and holds no {STATE_NAME}; choose a new or empty folder"
        )
    state = _state_or_none(output, overwrite and not resume)
    if resume:
        return state
    if not overwrite:
        raise ConvertError(
            f"{output}: holds an earlier conversion ({(state or {}).get('status')}); pass --resume "
            "to continue it or --overwrite to start over"
        )
    files = earlier_files(output, state)
    kept = (
        f" (kept: {', '.join(files.others[:5])}{' ...' if len(files.others) > 5 else ''})"
        if files.others
        else ""
    )
    notice(f"--overwrite: removing {files.describe()} of the earlier conversion in {output}{kept}")
    for path in files.shards + files.own:
        path.unlink(missing_ok=True)
    remove_index(output)
    return None


def disk_full_error(exc: BaseException, output: pathlib.Path) -> ConvertError | None:
    """The error to show for ``exc`` when it is a write that failed for lack of space (None
    for anything else)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        name, detail = DISK_FULL[exc.errno], exc.strerror or str(exc)
    elif isinstance(exc, sqlite3.OperationalError) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
    ):
        # Energon's index: SQLite says SQLITE_FULL, or only "disk I/O error" over a size limit
        name = getattr(exc, "sqlite_errorname", "SQLITE_FULL")
        detail = f"writing Energon's index: {exc}" + (
            "" if name == "SQLITE_FULL" else " (a full disk or a file-size limit?)"
        )
    else:
        return None
    filename = getattr(exc, "filename", None)
    where = f" ({filename})" if filename else ""
    return ConvertError(
        f"{output}: a write failed: {detail} ({name}){where}. Nothing written before the last "
        "checkpoint is lost: free some space (or raise the quota or file-size limit), then run "
        "the same command with --resume to continue"
    )
