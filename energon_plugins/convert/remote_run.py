"""``convert`` and ``convert merge`` with a SOURCE, media folder, part folders or OUTPUT on object
storage (``msc://PROFILE/...``, read and written through multi-storage-client).

- A remote SOURCE (one file, or a folder of the format's files) is copied into the staging
  folder (:func:`~energon_plugins.convert.staging.stage_source`) and converted from there: one
  download serves the fingerprint (size and SHA-256, what ``--resume`` and ``merge`` compare),
  the record count and the scan; parquet needs random access anyway, and a source-format
  plugin keeps its contract (``scan`` gets a local path). The state names the URL. The default
  media folder is the remote folder the source file is in.
- A remote media folder (``-o image_folder=msc://...``, or that default) is read object by
  object with the checks of :mod:`~energon_plugins.convert.formats.remote_media`; its profile
  and bucket are checked before the first record.
- A remote OUTPUT (a dataset, or a part with ``--part K/N``) is converted into the staging
  folder exactly as into a local folder, so its bytes are a local run's, then uploaded with
  its index and state last (:func:`~energon_plugins.convert.staging.publish`). ``--resume``
  continues an interrupted conversion from the staging folder, or an interrupted upload; on a
  finished one it returns its result. The staging copies are removed once the upload is done.
- ``merge`` reads remote part folders in place (ranged reads, see
  :class:`~energon_plugins.convert.parts.PartFolder`) and a remote OUTPUT is merged in the
  staging folder and uploaded the same way.

Every storage failure is one :class:`~energon_plugins.convert.storage.ConvertStorageError`
naming the URL and the profile (:mod:`~energon_plugins.convert.storage`).
"""

import pathlib
from typing import Any

from energon_plugins.config.remote_urls import clean_url, is_msc
from energon_plugins.convert.parts import check_same_part
from energon_plugins.convert.progress import ConvertProgress
from energon_plugins.convert.result import ConvertResult
from energon_plugins.convert.run import convert_local
from energon_plugins.convert.settings import ConvertSettings
from energon_plugins.convert.staging import (
    DATASET_DIR,
    SOURCE_DIR,
    cleanup,
    publish,
    remote_output_state,
    remote_rows,
    remote_source_files,
    stage_source,
    staging_folder,
)
from energon_plugins.convert.state import check_resumable, check_source, load_state
from energon_plugins.convert.storage import RemoteFolder
from energon_plugins.convert.workers import build_reader
from energon_plugins.errors import ConvertError


def convert_with_store(
    source: Any,
    output: Any,
    source_format: Any,
    settings: ConvertSettings,
    part: Any,
    *,
    resume: bool,
    overwrite: bool,
    staging: Any,
    watcher: ConvertProgress,
    started: float,
) -> ConvertResult:
    """:func:`~energon_plugins.convert.run.convert_dataset` when the source, the media folder or
    the output is an ``msc://`` URL (see the module).

    Raises:
        ConvertError: as for a local conversion, each naming the URL;
            ConvertStorageError: an unknown profile, a missing bucket or source, refused
            credentials, a failed upload (``--resume`` uploads the rest).
    """
    remote = RemoteFolder(output, "the output folder") if is_msc(output) else None
    target = remote.url if remote is not None else str(pathlib.Path(output).expanduser().resolve())
    source = clean_url(source) if is_msc(source) else pathlib.Path(source).expanduser().resolve()
    if isinstance(source, pathlib.Path) and not source.exists():
        raise ConvertError(f"{source}: no such file or folder")
    _check_apart(source, target)
    reader = build_reader(source_format, settings)
    media = settings.options.get("image_folder")
    if is_msc(media):
        RemoteFolder(str(media), "the media folder").check()
    suffixes = getattr(reader, "source_suffixes", None)
    if is_msc(source):
        remote_source_files(source, suffixes)  # there, before anything is removed or written
    staging_dir = staging_folder(staging, target)
    local = staging_dir / DATASET_DIR if remote is not None else pathlib.Path(target)
    if remote is not None:
        earlier = remote_output_state(remote, resume=resume, overwrite=overwrite, notice=watcher.notice)
        if earlier is not None:
            return _resume_remote(earlier, remote, local, source, reader, settings, part, watcher)
        held = _state_or_none(local)
        if held is not None and not (resume or overwrite):
            raise ConvertError(
                f"{staging_dir}: the staging folder holds an earlier conversion to {remote.url} "
                f"({held.get('status')}); pass --resume to continue it or --overwrite to start over"
            )
    elif resume and is_msc(source):
        held = _state_or_none(local)
        if held is not None and held.get("status") == "done":
            check_resumable(held, settings.output_settings())
            check_same_part(held, part, target)
            if _unchanged(held, str(source), suffixes):
                return ConvertResult.from_json(held["result"])
    origin = None
    if is_msc(source):
        origin = stage_source(str(source), staging_dir / SOURCE_DIR, suffixes, watcher.phase)
    local_source = origin.root if origin is not None else pathlib.Path(source)
    try:
        result = convert_local(
            local_source,
            local,
            reader,
            settings,
            part,
            resume=resume,
            overwrite=overwrite,
            watcher=watcher,
            started=started,
            origin=origin,
        )
    except ConvertError as exc:  # a message about the copy names what it is a copy of
        if origin is None or str(origin.root) not in str(exc):
            raise
        raise type(exc)(str(exc).replace(str(origin.root), origin.url)) from None
    if remote is not None:
        result = ConvertResult.from_json(publish(local, remote, watcher.phase)["result"])
    cleanup(staging_dir, staging_dir / SOURCE_DIR, *([local] if remote is not None else []))
    return result


def _state_or_none(folder: pathlib.Path) -> dict[str, Any] | None:
    """The conversion state in ``folder`` (None: none, or unreadable: the run says so)."""
    try:
        return load_state(folder) if folder.is_dir() else None
    except ConvertError:
        return None


def _check_apart(source: Any, target: str) -> None:
    """Refuse an output that is the source, holds it or lies inside it (both on one store).

    Raises:
        ConvertError: naming both.
    """
    if not (is_msc(source) and is_msc(target)):
        return
    if target == source or target.startswith(f"{source}/"):
        raise ConvertError(f"{target}: the output folder must not be the source or inside it")
    if str(source).startswith(f"{target}/"):
        raise ConvertError(
            f"{source}: the source is inside the output folder {target}; choose another output folder"
        )


def _unchanged(state: dict[str, Any], url: str, suffixes: Any) -> bool:
    """Whether the remote source's files have the names, sizes and times of the state's
    fingerprint (one listing, nothing downloaded)."""
    before = {row[0]: list(row[1:3]) for row in state.get("fingerprint", [])}
    return {row[0]: row[1:3] for row in remote_rows(url, suffixes)} == before


def _resume_remote(
    state: dict[str, Any],
    remote: RemoteFolder,
    local: pathlib.Path,
    source: Any,
    reader: Any,
    settings: ConvertSettings,
    part: Any,
    watcher: ConvertProgress,
) -> ConvertResult:
    """``--resume`` of a conversion whose state is on the store: a finished one gives its result
    (the source unchanged), an interrupted upload is finished from the staging folder."""
    check_resumable(state, settings.output_settings())
    check_same_part(state, part, remote.url)
    if state.get("status") == "done":
        suffixes = getattr(reader, "source_suffixes", None)
        if isinstance(source, pathlib.Path):
            files = reader.source_files(source) if callable(getattr(reader, "source_files", None)) else None
            check_source(state, source, files)
        elif not _unchanged(state, source, suffixes):
            staging = local.parent
            copy = stage_source(source, staging / SOURCE_DIR, suffixes, watcher.phase)
            check_source(state, copy.root, reader.source_files(copy.root))
            cleanup(staging, staging / SOURCE_DIR)
        return ConvertResult.from_json(state["result"])
    held = _state_or_none(local)
    if held is None or held.get("status") != "done":
        raise ConvertError(
            f"{remote.url}: its upload was interrupted, and the staging folder {local.parent} holds "
            "no finished conversion to upload; pass the --staging of that run, or start over with "
            "--overwrite"
        )
    result = ConvertResult.from_json(publish(local, remote, watcher.phase)["result"])
    cleanup(local.parent, local, local.parent / SOURCE_DIR)
    return result


def merge_to_store(
    folders: list[Any],
    totals: dict[str, Any],
    output: str,
    *,
    overwrite: bool,
    workers: int | None,
    staging: Any,
    watcher: ConvertProgress,
    started: float,
) -> ConvertResult:
    """:func:`~energon_plugins.convert.merge.merge_parts` into the ``msc://`` prefix ``output``:
    merged in the staging folder, then uploaded (index and state last).

    Raises:
        ConvertError: the output is a part folder or inside one, or holds an earlier
            conversion (without ``overwrite``); ConvertStorageError: the store failed.
    """
    from energon_plugins.convert.merge import merge_into

    remote = RemoteFolder(output, "the output folder")
    for folder in folders:
        path = str(folder.path)
        if remote.url == path or remote.url.startswith(f"{path}/"):
            raise ConvertError(
                f"{remote.url}: the output folder must not be a part folder ({path}) or inside one"
            )
    remote_output_state(remote, resume=False, overwrite=overwrite, notice=watcher.notice, merging=True)
    staging_dir = staging_folder(staging, remote.url)
    local = staging_dir / DATASET_DIR
    merge_into(folders, totals, local, overwrite=True, workers=workers, watcher=watcher, started=started)
    state = publish(local, remote, watcher.phase)
    cleanup(staging_dir, local)
    return ConvertResult.from_json(state["result"])
