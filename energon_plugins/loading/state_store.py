"""Where loader-state files live: a local folder, or an object store through multi-storage-client.

Every read, write and listing of loader-state files (:mod:`~energon_plugins.loading.checkpoint`,
:mod:`~energon_plugins.loading.rank_files`, :mod:`~energon_plugins.loading.safe_load`,
``checkpoint info`` and ``redistribute``) goes through the functions here, which take a local
:class:`~pathlib.Path` or a storage-client path (``msc://PROFILE/bucket/...``, a
``multistorageclient.Path``) alike; :func:`location` makes one of either from what a user passes.
The storage client reads its own configuration (``MSC_CONFIG``), as for ``msc://`` datasets.

Writes are atomic: a local file is written to a temporary file in the same folder and renamed
over the final name; an object is stored by one ``PUT`` of its complete bytes (S3 makes an
object visible only once its upload has completed), so a reader sees the previous state or the
new one, never part of one. Reads check the object's size before they download anything.

A store's failure (no permission, unknown profile, no connection) is a :class:`StateStoreError`
worded by :func:`~energon_plugins.config.remote_storage.describe_storage_error`: it names the
URL, the storage profile and where the storage client's config comes from, never carries a
credential, and the storage client's own exception is not chained to it. URLs are parsed by
:mod:`~energon_plugins.config.remote_urls`.
"""

import contextlib
import fnmatch
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Union

from energon_plugins.config.remote_storage import describe_storage_error, error_code, redact, where
from energon_plugins.config.remote_urls import is_url, profile_of
from energon_plugins.errors import RemoteStorageError

if TYPE_CHECKING:
    from multistorageclient import Path as RemotePath

StatePath = Union[Path, "RemotePath"]
"""A local path or a storage-client path (``multistorageclient.Path``)."""

__all__ = [
    "ObjectTooLargeError",
    "StatePath",
    "StateStoreError",
    "delete",
    "exists",
    "file_size",
    "is_dir",
    "is_file",
    "is_remote",
    "is_url",
    "location",
    "matching_names",
    "names",
    "profile_of",
    "read_bytes",
    "write_atomic",
]


class StateStoreError(RemoteStorageError):
    """The object store refused or could not serve a request on a loader-state path (no
    permission, unknown profile, unreachable endpoint); the message names the URL and profile,
    ``object_key`` holds the URL and ``operation`` what was asked (``read``, ``write``...)."""


class ObjectTooLargeError(StateStoreError):
    """A file or object is larger than the reader accepts; nothing of it was downloaded."""

    def __init__(self, text: str, *, url: str, size: int, limit: int) -> None:
        super().__init__(text, object_key=url, operation="read")
        self.size, self.limit = size, limit


def is_remote(path: Any) -> bool:
    """Whether ``path`` is on an object store (a URL or ``multistorageclient.Path``), not local."""
    return not isinstance(path, PurePath) and is_url(os.fspath(path))


def _failure(path: Any, action: str, exc: BaseException) -> StateStoreError:
    """The error for the storage client's ``exc`` on ``path``: ``cannot ACTION`` and the shared
    wording (URL, profile, config source, the problem; credentials removed)."""
    url = os.fspath(path)
    text = redact(describe_storage_error(url, "the loader state", exc))
    return StateStoreError(f"cannot {action} {text}", object_key=url, operation=action)


@contextlib.contextmanager
def _storage_call(path: Any, action: str) -> Iterator[None]:
    """Run one storage-client request on ``path``: ``FileNotFoundError`` (a missing object, or a
    bucket that does not exist) names ``path``; any other failure becomes a
    :class:`StateStoreError` (see :func:`_failure`)."""
    url = os.fspath(path)
    try:
        yield
    except StateStoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - every storage failure becomes one message
        if isinstance(exc, FileNotFoundError) or error_code(exc) == "NoSuchBucket":
            failure: OSError = FileNotFoundError(
                f"{url} does not exist (storage profile {profile_of(url)!r})"
            )
        else:
            failure = _failure(url, action, exc)
    else:
        return
    raise failure from None


def location(path: "str | os.PathLike[str]") -> StatePath:
    """``path`` as a :class:`~pathlib.Path`, or a ``multistorageclient.Path`` for a URL.

    Raises:
        StateStoreError: the URL's profile is not configured, or its configuration is invalid.
    """
    if isinstance(path, PurePath):
        return Path(path)
    text = os.fspath(path)
    if not is_url(text):
        return Path(text)
    import multistorageclient as msc

    if isinstance(path, msc.Path):
        return path
    with _storage_call(text, "resolve the storage profile of"):
        remote = msc.Path(text)
    return remote


def _info(path: Any, action: str, *, folder: bool = False) -> Any:
    """The storage client's metadata of ``path`` (``folder``: as a prefix), None when absent."""
    import multistorageclient as msc

    url = os.fspath(path).rstrip("/") + ("/" if folder else "")
    try:
        with _storage_call(path, action):
            info = msc.info(url)
    except FileNotFoundError:
        return None
    return info


def exists(path: StatePath) -> bool:
    """Whether a file or folder is at ``path`` (an object store's folder: any key under it).

    Raises:
        StateStoreError: the store cannot be asked.
    """
    if not is_remote(path):
        return Path(path).exists()
    return _info(path, "look up") is not None


def is_dir(path: StatePath) -> bool:
    """Whether ``path`` is a folder (on an object store: a prefix some key starts with).

    Raises:
        StateStoreError: the store cannot be asked.
    """
    if not is_remote(path):
        return Path(path).is_dir()
    info = _info(path, "look up", folder=True)
    return info is not None and info.type == "directory"


def is_file(path: StatePath) -> bool:
    """Whether ``path`` is a file (an object).

    Raises:
        StateStoreError: the store cannot be asked.
    """
    if not is_remote(path):
        return Path(path).is_file()
    info = _info(path, "look up")
    return info is not None and info.type == "file"


def file_size(path: StatePath) -> int:
    """The size in bytes of the file at ``path``.

    Raises:
        FileNotFoundError: nothing is there (the message names the path).
        IsADirectoryError: ``path`` is a folder.
        StateStoreError: the store cannot be asked.
    """
    if not is_remote(path):
        local = Path(path)
        if local.is_dir():
            raise IsADirectoryError(f"{local} is a directory")
        return local.stat().st_size
    info = _info(path, "look up")
    if info is None:
        raise FileNotFoundError(f"{os.fspath(path)} does not exist (storage profile {profile_of(path)!r})")
    if info.type != "file":
        raise IsADirectoryError(f"{os.fspath(path)} is a directory")
    return int(info.content_length)


def read_bytes(path: StatePath, limit: int) -> bytes:
    """The whole content of the file at ``path``, once its size is known to be at most ``limit``
    (an object's size comes from its metadata; only that many bytes are then requested).

    Raises:
        ObjectTooLargeError: the file has more than ``limit`` bytes (nothing of it was read).
        FileNotFoundError, IsADirectoryError, StateStoreError: as :func:`file_size`.
    """
    size = file_size(path)
    if size > limit:
        raise ObjectTooLargeError(
            f"{os.fspath(path)} is {size:,} bytes, more than the {limit:,} allowed; refusing to read it",
            url=os.fspath(path),
            size=size,
            limit=limit,
        )
    if not is_remote(path):
        with open(path, "rb") as fh:
            return fh.read(limit)
    if size == 0:
        return b""
    import multistorageclient as msc
    from multistorageclient.types import Range

    with _storage_call(path, "read"):
        client, key = msc.resolve_storage_client(os.fspath(path))
        data = client.read(key, byte_range=Range(offset=0, size=size))
    return bytes(data)


def names(folder: StatePath) -> dict[str, bool]:
    """What is directly in ``folder``: entry name -> whether it is a folder (``{}`` when
    ``folder`` does not exist).

    Raises:
        StateStoreError: the store cannot list it.
    """
    if not is_remote(folder):
        local = Path(folder)
        if not local.is_dir():
            return {}
        return {entry.name: entry.is_dir() for entry in local.iterdir()}
    import multistorageclient as msc

    found: dict[str, bool] = {}
    try:
        with _storage_call(folder, "list"):
            for item in msc.list(os.fspath(folder).rstrip("/") + "/", include_directories=True):
                found[item.key.rstrip("/").rsplit("/", 1)[-1]] = item.type == "directory"
    except FileNotFoundError:
        return {}  # also a folder in a bucket that does not exist
    return found


def matching_names(folder: StatePath, pattern: str, *, folders: bool | None = None) -> list[str]:
    """The sorted names in ``folder`` matching the glob ``pattern`` (``folders``: only folders
    when True, only files when False)."""
    return sorted(
        name
        for name, is_folder in names(folder).items()
        if fnmatch.fnmatchcase(name, pattern) and (folders is None or folders == is_folder)
    )


def write_atomic(path: StatePath, data: bytes) -> None:
    """Store ``data`` at ``path`` whole or not at all (see the module docstring); a local
    file's folder is created when missing.

    Raises:
        StateStoreError: the store refused the write or cannot be reached (nothing was stored).
        OSError: a local write failed (the previous file is left as it was).
    """
    if not is_remote(path):
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return
    import multistorageclient as msc

    url = os.fspath(path)
    try:
        with _storage_call(url, "write"):
            msc.write(url, bytes(data))  # one PUT of the complete bytes
    except FileNotFoundError:  # S3 answers a PUT with 404 only when the bucket is missing
        raise StateStoreError(
            f"cannot write {url}: its bucket does not exist {where(url)}", object_key=url, operation="write"
        ) from None


def delete(path: StatePath) -> None:
    """Remove the file at ``path`` (nothing when it is absent).

    Raises:
        StateStoreError: the store refused or cannot be reached.
    """
    if not is_remote(path):
        Path(path).unlink(missing_ok=True)
        return
    import multistorageclient as msc

    with contextlib.suppress(FileNotFoundError), _storage_call(path, "delete"):
        msc.delete(os.fspath(path))
