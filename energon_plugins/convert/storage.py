"""``msc://PROFILE/...`` locations for ``convert``: the objects under a prefix, reads, uploads,
and the conversion's storage error.

``convert`` reads a source, a media folder or part folders from object storage, and writes a
dataset there, through multi-storage-client (MSC, the storage client Energon reads ``msc://``
datasets with), configured by its own file (``MSC_CONFIG``). :class:`RemoteFolder` is a prefix
on a store: its objects with their sizes (one listing), reading one object whole, a byte range
of it or as a buffered stream (:func:`RemoteFolder.stream`: ranged reads of
:data:`STREAM_CHUNK` bytes, so a part's shard is merged without being downloaded), uploading
and deleting. Every failure becomes a :class:`ConvertStorageError` worded by
:func:`~energon_plugins.config.remote_storage.describe_storage_error` (the URL, the profile,
where MSC's config came from, never a credential); URLs are parsed by
:mod:`~energon_plugins.config.remote_urls`.

Import-light: MSC is imported on the first storage call, never at import.
"""

import contextlib
import io
import os
from typing import Any

from energon_plugins.config import remote_storage
from energon_plugins.config.remote_urls import MSC_PREFIX, clean_url, join_url, split_url
from energon_plugins.errors import ConvertError

STREAM_CHUNK = 8 * 2**20
"""Bytes per ranged read of :meth:`RemoteFolder.stream` (memory per open stream)."""


class ConvertStorageError(ConvertError):
    """A store could not be used (an unknown profile, a missing bucket, refused credentials, an
    endpoint that does not answer): it stops the conversion, which ``--resume`` continues."""


def inside(key: str, prefix: str) -> bool:
    """Whether the key ``key`` lies under the prefix ``prefix`` (``""``: everything)."""
    return not prefix or key.startswith(prefix.rstrip("/") + "/")


def storage_errors(url: str, what: str) -> contextlib.AbstractContextManager[None]:
    """Turn any storage failure in the block into a :class:`ConvertStorageError` (not chained:
    the storage client's exception may quote its config); a :class:`ConvertError` passes."""
    return remote_storage.storage_errors(url, what, error=ConvertStorageError, keep=(ConvertError,))


def resolve(url: str, what: str) -> tuple[Any, str]:
    """``(storage client, path inside the profile)`` of ``url``.

    Raises:
        ConvertStorageError: the profile is unknown or its config unreadable.
    """
    import multistorageclient as msc

    with storage_errors(url, what):
        client, inner = msc.resolve_storage_client(url)
    return client, inner.strip("/")


def mtime_ns(meta: Any) -> int:
    """An object's last-modified time in nanoseconds since the epoch (exact, no float)."""
    import datetime

    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (meta.last_modified - epoch) // datetime.timedelta(microseconds=1) * 1000


# ----------------------------------------------------------------------------- a prefix
class RemoteFolder:
    """The objects under ``url`` (a prefix on a store), ``what`` naming it in messages.

    Raises:
        ConvertStorageError: the profile is unknown.
    """

    def __init__(self, url: str, what: str = "the folder") -> None:
        self.url = clean_url(url)
        self.what = what
        self.client, self.prefix = resolve(self.url, what)

    def __str__(self) -> str:
        return self.url

    def key(self, name: str) -> str:
        """The path inside the profile of ``name`` (relative to this folder)."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def url_of(self, key: str) -> str:
        """The ``msc://`` URL of a path inside the profile."""
        return f"{MSC_PREFIX}{split_url(self.url)[0]}/{key}"

    def listing(self) -> dict[str, Any]:
        """``{relative name: object metadata}`` of every object under the folder (recursive).

        Raises:
            ConvertStorageError: a missing bucket, refused credentials, no answer.
        """
        found: dict[str, Any] = {}
        start = f"{self.prefix}/" if self.prefix else ""
        with storage_errors(self.url, self.what):
            for item in self.client.list(start):
                key = str(item.key).lstrip("/")
                if item.type == "file" and key.startswith(start):
                    found[key[len(start) :]] = item
        return found

    def check(self) -> bool:
        """Whether any object lies under the folder (one short listing: the profile, the
        bucket and the credentials are checked on the way).

        Raises:
            ConvertStorageError: a missing bucket, refused credentials, no answer.
        """
        start = f"{self.prefix}/" if self.prefix else ""
        with storage_errors(self.url, self.what):
            return next(iter(self.client.list(start)), None) is not None

    def sizes(self) -> dict[str, int]:
        """``{relative name: size in bytes}`` of every object under the folder."""
        return {name: int(item.content_length or 0) for name, item in self.listing().items()}

    def read(self, name: str, what: str) -> bytes | None:
        """The bytes of object ``name`` (None when there is none)."""
        with storage_errors(join_url(self.url, name), what):
            try:
                return bytes(self.client.read(self.key(name)))
            except FileNotFoundError:
                return None

    def stream(self, name: str, size: int, what: str) -> io.BufferedReader:
        """Object ``name`` of ``size`` bytes as a buffered binary stream of ranged reads."""
        raw = _ObjectReader(self, name, size, what)
        return io.BufferedReader(raw, buffer_size=STREAM_CHUNK)

    def download(self, name: str, local: str | os.PathLike, what: str) -> None:
        """Copy object ``name`` to the local file ``local``."""
        with storage_errors(join_url(self.url, name), what):
            self.client.download_file(self.key(name), os.fspath(local))

    def upload(self, local: str | os.PathLike, name: str, what: str) -> None:
        """Copy the local file ``local`` to object ``name`` (replacing it)."""
        with storage_errors(join_url(self.url, name), what):
            self.client.upload_file(self.key(name), os.fspath(local))

    def write(self, name: str, data: bytes, what: str) -> None:
        """Store ``data`` as object ``name`` (one request)."""
        with storage_errors(join_url(self.url, name), what):
            self.client.write(self.key(name), data)

    def delete(self, names: list[str], what: str) -> None:
        """Delete the objects ``names`` (missing ones are skipped)."""
        for name in names:
            with storage_errors(join_url(self.url, name), what):
                with contextlib.suppress(FileNotFoundError):
                    self.client.delete(self.key(name))


class _ObjectReader(io.RawIOBase):
    """One object read by byte ranges, for :meth:`RemoteFolder.stream`."""

    def __init__(self, folder: RemoteFolder, name: str, size: int, what: str) -> None:
        super().__init__()
        self.folder, self.name, self.size, self.what = folder, name, size, what
        self.position = 0

    def readable(self) -> bool:
        """Always: the stream reads."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the next byte range (0 at the end of the object)."""
        from multistorageclient.types import Range

        count = min(len(buffer), self.size - self.position)
        if count <= 0:
            return 0
        with storage_errors(join_url(self.folder.url, self.name), self.what):
            data = bytes(
                self.folder.client.read(
                    self.folder.key(self.name), byte_range=Range(offset=self.position, size=count)
                )
            )
        if not data:
            raise ConvertStorageError(
                f"{join_url(self.folder.url, self.name)}: the object ended after {self.position} of "
                f"{self.size} bytes (changed while it was read?)"
            )
        view = memoryview(buffer).cast("B")
        view[: len(data)] = data
        self.position += len(data)
        return len(data)
