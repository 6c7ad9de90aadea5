"""The local side of a conversion on object storage: the staging folder, the copy of a remote
source, and the upload of a finished dataset (or part) with its state last.

Energon's prepare step and the shard writer work on local files, so a conversion whose SOURCE
or OUTPUT is an ``msc://`` URL runs in a local *staging folder* (``--staging DIR``; by default
``energon-plugins-convert-<digest of OUTPUT>`` in the system's temporary folder, the same for
every run of one OUTPUT so that ``--resume`` finds it again):

- ``source/``: the remote source's files (one file, or a folder's files with the format's
  suffixes), each downloaded once and given the object's modification time, so the source's
  fingerprint (size, time, SHA-256) is the one a local copy of the same bytes has and a resumed
  run downloads only what changed (:func:`stage_source`);
- ``dataset/``: the dataset or part, converted (or merged) exactly as into a local OUTPUT, then
  uploaded (:func:`publish`).

:func:`publish` writes ``convert.json`` first with ``status: uploading`` (it marks the prefix as
this conversion's), then the shards, ``.tar.idx`` files and the report (those already there at
their size are skipped: a rerun resumes the upload), then ``.nv-meta/``, and ``convert.json``
with ``status: done`` last: a reader never finds an index that points at a missing shard, and
``done`` on the store means every object is there. :func:`remote_output_state` applies the
output folder's rules to a prefix (new or empty; an earlier conversion only with ``--resume``
or ``--overwrite``, which removes that conversion's own objects and nothing else).
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import posixpath
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from energon_plugins.config.remote_storage import where
from energon_plugins.config.remote_urls import clean_url, join_url, parent_url
from energon_plugins.convert.output import INDEX_FOLDER, STATE_TMP, describe_names, earlier_names
from energon_plugins.convert.report import REPORT_NAME
from energon_plugins.convert.state import STATE_NAME, load_state, parse_state, save_state
from energon_plugins.convert.storage import (
    ConvertStorageError,
    RemoteFolder,
    mtime_ns,
    resolve,
    storage_errors,
)
from energon_plugins.errors import ConvertError

SOURCE_DIR = "source"
"""The staging folder's copy of a remote source."""
DATASET_DIR = "dataset"
"""The staging folder's dataset (or part), before it is uploaded."""


def staging_folder(staging: Any, output: str) -> pathlib.Path:
    """``staging`` (resolved), or the default one for ``output`` (a URL or a resolved path)."""
    if staging is not None:
        return pathlib.Path(staging).expanduser().resolve()
    digest = hashlib.sha256(output.encode("utf-8")).hexdigest()[:16]
    return pathlib.Path(tempfile.gettempdir()) / f"energon-plugins-convert-{digest}"


@dataclasses.dataclass(frozen=True)
class SourceCopy:
    """A local copy of a remote source: ``root`` (a file, or a folder) came from ``url``."""

    root: pathlib.Path
    url: str

    def url_of(self, path: Any) -> str:
        """The URL a file of the copy came from."""
        path = pathlib.Path(path)
        return self.url if path == self.root else join_url(self.url, path.relative_to(self.root).as_posix())


# ----------------------------------------------------------------------------- a remote source
def remote_source_files(url: str, suffixes: Sequence[str] | None) -> tuple[dict[str, Any], bool]:
    """``({relative name: object metadata}, single file?)`` of the remote source ``url``: the
    object itself, or the objects under the prefix whose names end with ``suffixes``.

    Raises:
        ConvertError: nothing there (or no file with the suffixes), a folder for a format that
            names no suffixes; ConvertStorageError: the store failed.
    """
    client, inner = resolve(url, "the source")
    with storage_errors(url, "the source"):
        try:
            meta = client.info(inner) if inner else None
        except FileNotFoundError:
            meta = None
    if meta is not None and meta.type == "file":
        return {posixpath.basename(inner): meta}, True
    listing = RemoteFolder(url, "the source").listing()  # a missing bucket is said here
    if not listing:
        raise ConvertError(f"{url}: no such source (no object, and no folder) {where(url)}")
    if suffixes is None:
        raise ConvertError(
            f"{url}: a folder, and the source format does not say which of its files it reads "
            "(no source_suffixes); give the URL of one file"
        )
    files = {name: item for name, item in listing.items() if name.endswith(tuple(suffixes))}
    if not files:
        raise ConvertError(f"{url}: holds no {' or '.join(suffixes)} file {where(url)}")
    return files, False


def remote_rows(url: str, suffixes: Sequence[str] | None) -> list[list[Any]]:
    """``[relative name, size, mtime_ns]`` per file of the remote source (one listing): what a
    finished conversion's fingerprint starts with when the source has not changed."""
    files, _ = remote_source_files(url, suffixes)
    return sorted([name, int(meta.content_length or 0), mtime_ns(meta)] for name, meta in files.items())


def stage_source(
    url: str, dest: pathlib.Path, suffixes: Sequence[str] | None, phase: Callable[[str], None]
) -> SourceCopy:
    """Copy the remote source ``url`` into ``dest`` (files already there at the object's size and
    time are kept; anything else in ``dest`` is removed); the copy.

    Raises:
        ConvertError: see :func:`remote_source_files`; a download that fails.
    """
    url = clean_url(url)
    files, single = remote_source_files(url, suffixes)
    folder = RemoteFolder(parent_url(url) if single else url, "the source")
    root = dest / next(iter(files)) if single else dest / "files"
    wanted = {root} if single else {root / name for name in files}
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(dest.rglob("*"), reverse=True):  # stale files of an earlier source
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    todo = []
    for name, meta in sorted(files.items()):
        local = root if single else root / name
        size, when = int(meta.content_length or 0), mtime_ns(meta)
        if not (local.is_file() and local.stat().st_size == size and local.stat().st_mtime_ns == when):
            todo.append((name, local, size, when))
    if todo:
        phase(f"downloading the source: {len(todo)} file(s), {sum(t[2] for t in todo)} bytes from {url}")
    for name, local, size, when in todo:
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + ".part")
        folder.download(name, part, "the source")
        if part.stat().st_size != size:
            raise ConvertError(f"{join_url(folder.url, name)}: changed while it was downloaded; run again")
        os.utime(part, ns=(when, when))
        os.replace(part, local)
    return SourceCopy(root=root, url=url)


# ----------------------------------------------------------------------------- a remote output
def remote_output_state(
    remote: RemoteFolder,
    *,
    resume: bool,
    overwrite: bool,
    notice: Callable[[str], None],
    merging: bool = False,
) -> dict[str, Any] | None:
    """The state of the conversion under the prefix ``remote`` to resume (None: start fresh),
    after the output folder's rules; with ``overwrite`` the earlier conversion's own objects
    are removed first (``notice`` says which), its index first and its state last. A merge
    (``merging``) is never resumed: its message names ``--overwrite`` only.

    Raises:
        ConvertError: objects but no conversion there; a conversion and neither ``resume``
            nor ``overwrite``; ConvertStorageError: a missing bucket, refused credentials.
    """
    listing = remote.sizes()
    if not listing:
        return None
    if STATE_NAME not in listing:
        shown = ", ".join(sorted(listing)[:5]) + (" ..." if len(listing) > 5 else "")
        raise ConvertError(
            f"{remote.url}: holds {len(listing)} object(s) ({shown}) and no {STATE_NAME}; choose a "
            "new or empty prefix"
        )
    state: dict[str, Any] | None
    try:
        state = parse_state(
            remote.read(STATE_NAME, "the conversion state") or b"", join_url(remote.url, STATE_NAME)
        )
    except ConvertStorageError:
        raise
    except ConvertError:
        if resume or not overwrite:
            raise
        state = None
    if resume:
        return state
    if not overwrite:
        fix = (
            "pass --overwrite to replace it"
            if merging
            else "pass --resume to continue it or --overwrite to start over"
        )
        raise ConvertError(
            f"{remote.url}: holds an earlier conversion ({(state or {}).get('status')}); {fix}"
        )
    own, others = earlier_names(list(listing), state)
    kept = f" (kept: {', '.join(others[:5])}{' ...' if len(others) > 5 else ''})" if others else ""
    notice(f"--overwrite: removing {describe_names(own)} of the earlier conversion in {remote.url}{kept}")
    first = [name for name in own if name.startswith(f"{INDEX_FOLDER}/")]
    last = [name for name in own if name in (STATE_NAME, STATE_TMP)]
    middle = [name for name in own if name not in first and name not in last]
    remote.delete(first + middle + last, "the earlier conversion")
    return None


def publish(local: pathlib.Path, remote: RemoteFolder, phase: Callable[[str], None]) -> dict[str, Any]:
    """Upload the finished conversion in ``local`` to ``remote`` (see the module); its state,
    whose result now names the remote dataset and report.

    Raises:
        ConvertStorageError: an upload failed, naming the object; a rerun with ``--resume``
            uploads what is missing.
    """
    state = load_state(local)
    if state is None or state.get("status") != "done":
        raise ConvertError(f"{local}: holds no finished conversion to upload to {remote.url}")
    state["result"].update(output=remote.url, report=join_url(remote.url, REPORT_NAME))
    save_state(local, state)  # the staged copy says where it went
    names = [path.relative_to(local).as_posix() for path in local.rglob("*") if path.is_file()]
    own, _ = earlier_names(names, state)
    index = [name for name in own if name.startswith(f"{INDEX_FOLDER}/")]
    data = [name for name in own if name not in index and name not in (STATE_NAME, STATE_TMP)]
    try:
        present = remote.sizes()
        marker = json.dumps({**state, "status": "uploading"}, indent=1, ensure_ascii=False)
        remote.write(STATE_NAME, marker.encode("utf-8"), "the conversion state")
        todo = [name for name in data if present.get(name) != (local / name).stat().st_size]
        size = sum((local / name).stat().st_size for name in todo + index)
        phase(f"uploading {len(todo) + len(index) + 1} files ({size} bytes) to {remote.url}")
        for name in todo + index + [STATE_NAME]:
            remote.upload(local / name, name, "the upload")
    except ConvertStorageError as exc:
        raise ConvertStorageError(
            f"{exc}. The conversion is complete in the staging folder {local.parent}: run the same "
            "command with --resume to upload the rest"
        ) from None
    return state


def cleanup(staging: pathlib.Path, *folders: pathlib.Path) -> None:
    """Remove ``folders`` (this conversion's, inside ``staging``) and ``staging`` when empty."""
    import shutil

    for folder in folders:
        if folder.is_relative_to(staging) and folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()
