"""``msc://PROFILE/...`` locations for ``convert``: URLs, the objects under a prefix, reads,
uploads, and one error wording for every storage failure.

``convert`` reads a source, a media folder or part folders from object storage, and writes a
dataset there, through multi-storage-client (MSC, the storage client Energon reads ``msc://``
datasets with), configured by its own file (``MSC_CONFIG``). :class:`RemoteFolder` is a prefix
on a store: its objects with their sizes (one listing), reading one object whole, a byte range
of it or as a buffered stream (:func:`RemoteFolder.stream`: ranged reads of
:data:`STREAM_CHUNK` bytes, so a part's shard is merged without being downloaded), uploading
and deleting. Every failure becomes a :class:`ConvertStorageError` that names the URL, the
profile and where MSC's config came from (:func:`describe_failure`): an unknown profile (with
the ones the config defines), a missing bucket, refused credentials, an endpoint that does not
answer, a missing object. No message holds a credential: :func:`redact` removes the value of
every secret-looking environment variable and request signatures, and the storage client's
exceptions are not chained (their objects are dropped).

Import-light: MSC is imported on the first storage call, never at import.
"""

import contextlib
import io
import os
import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

from energon_plugins.errors import ConvertError

MSC_PREFIX = "msc://"
STREAM_CHUNK = 8 * 2**20
"""Bytes per ranged read of :meth:`RemoteFolder.stream` (memory per open stream)."""
DENIED = frozenset(
    {"403", "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"}
)
"""Storage error codes meaning the credentials were refused (or may not touch the path)."""
_SECRET_NAME = re.compile(r"secret|token|passw|credential|private|session|access_?key|api_?key", re.I)
_SIGNATURE = re.compile(r"((?:X-Amz-)?(?:Signature|Credential|Security-Token)=)[^&\s\"']+", re.I)
_URL_USER = re.compile(r"([a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)
_UNREACHABLE = {"EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError", "ReadTimeoutError"}
_UNREACHABLE |= {"ConnectionRefusedError", "ConnectionError"}


class ConvertStorageError(ConvertError):
    """A store could not be used (an unknown profile, a missing bucket, refused credentials, an
    endpoint that does not answer): it stops the conversion, which ``--resume`` continues."""


# ----------------------------------------------------------------------------- URLs
def is_msc(path: object) -> TypeGuard[str]:
    """Whether ``path`` is an ``msc://`` URL."""
    return isinstance(path, str) and path.startswith(MSC_PREFIX)


def clean_url(url: str) -> str:
    """``url`` without a trailing ``/`` and with ``.`` / ``//`` parts removed (``..`` is left to
    the callers that must refuse it)."""
    profile, inner = split_url(url)
    parts = [part for part in inner.split("/") if part not in ("", ".")]
    return f"{MSC_PREFIX}{profile}/{'/'.join(parts)}".rstrip("/")


def split_url(url: str) -> tuple[str, str]:
    """``(profile, path inside the profile)`` of ``msc://PROFILE/PATH``."""
    profile, _, inner = url[len(MSC_PREFIX) :].partition("/")
    return profile, inner.strip("/")


def join_url(url: str, name: str) -> str:
    """The URL of ``name`` (a relative POSIX path) under ``url``."""
    return f"{url.rstrip('/')}/{name.lstrip('/')}"


def parent_url(url: str) -> str:
    """The folder ``url`` is in."""
    profile, inner = split_url(url)
    return f"{MSC_PREFIX}{profile}/{posixpath.dirname(inner)}".rstrip("/")


def inside(key: str, prefix: str) -> bool:
    """Whether the key ``key`` lies under the prefix ``prefix`` (``""``: everything)."""
    return not prefix or key.startswith(prefix.rstrip("/") + "/")


# ----------------------------------------------------------------------------- messages
def redact(text: str) -> str:
    """``text`` without the value of any secret-looking environment variable
    (``AWS_SECRET_ACCESS_KEY``, ``*_TOKEN``, ...), request signatures or ``user@`` in URLs."""
    secrets = {value for name, value in os.environ.items() if _SECRET_NAME.search(name)}
    for secret in sorted((s for s in secrets if len(s.strip()) >= 4), key=len, reverse=True):
        text = text.replace(secret, "***")
    return _URL_USER.sub(r"\1***@", _SIGNATURE.sub(r"\1***", text))


def config_source() -> str:
    """Where MSC's config comes from, for a message (``MSC_CONFIG=...`` or its default places)."""
    named = os.environ.get("MSC_CONFIG")
    if named:
        return f"MSC_CONFIG={named}" + ("" if os.path.isfile(named) else " (no such file)")
    return "MSC's default config locations (MSC_CONFIG is unset)"


def where(url: str) -> str:
    """``(profile 'p', storage config MSC_CONFIG=...)``: the tail of every storage message."""
    return f"(profile {split_url(url)[0]!r}, storage config {config_source()})"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _error(exc: BaseException) -> Mapping[str, Any]:
    """The ``Error`` mapping of a botocore error in the chain (``{}`` when there is none)."""
    for link in _chain(exc):
        response = getattr(link, "response", None)
        if isinstance(response, Mapping) and isinstance(response.get("Error"), Mapping):
            return response["Error"]
    return {}


def _profiles() -> list[str]:
    try:
        from multistorageclient.config import StorageClientConfig

        data, _ = StorageClientConfig.read_msc_config()
        return sorted(str(name) for name in (data or {}).get("profiles") or {})
    except Exception:  # noqa: BLE001 - only a message's detail depends on it
        return []


def describe_failure(url: str, what: str, exc: BaseException) -> str:
    """What a storage failure on ``what`` at ``url`` means, naming the URL and the profile."""
    profile = split_url(url)[0]
    error, names = _error(exc), {type(link).__name__ for link in _chain(exc)}
    code = str(error.get("Code") or "")
    if isinstance(exc, ValueError) and f'Profile "{profile}" not found' in str(exc):
        known = _profiles()
        listed = f" (it defines {', '.join(known)})" if known else ""
        return (
            f"{url}: the storage profile {profile!r} is not defined in the storage client's "
            f"config, {config_source()}{listed}; define it there or point MSC_CONFIG at the file "
            "that does"
        )
    if code == "NoSuchBucket":
        bucket = error.get("BucketName")
        named = f"the bucket {bucket!r}" if bucket else "its bucket"
        return f"{url}: {named} does not exist (reading {what}) {where(url)}"
    if isinstance(exc, PermissionError) or code in DENIED:
        return (
            f"{url}: access denied to {what}: the store refused the credentials of profile "
            f"{profile!r}, or they may not use this path {where(url)}"
        )
    if names & {"NoCredentialsError", "PartialCredentialsError"}:
        return f"{url}: profile {profile!r} found no credentials {where(url)}"
    if names & _UNREACHABLE:
        return f"{url}: the storage endpoint of profile {profile!r} does not answer {where(url)}"
    if isinstance(exc, FileNotFoundError):
        return f"{url}: {what} does not exist {where(url)}"
    text = " ".join(str(exc).split())[:300]
    return f"{url}: {what} failed ({type(exc).__name__}: {text}) {where(url)}"


@contextlib.contextmanager
def storage_errors(url: str, what: str) -> Iterator[None]:
    """Turn any storage failure in the block into a :class:`ConvertStorageError` (not chained:
    the storage client's exception may quote its config)."""
    try:
        yield
    except ConvertError:
        raise
    except Exception as exc:  # noqa: BLE001 - every storage failure becomes one message
        message = redact(describe_failure(url, what, exc))
    else:
        return
    raise ConvertStorageError(message) from None


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
