"""Reading loader-state files without running code from them, within fixed memory bounds.

A loader state file is written by ``torch.save``: a zip archive (members stored, never
compressed) holding a pickle (``data.pkl``) and the tensor storages (``data/<key>``).
``torch.load(weights_only=True)`` cannot read it: Energon's state holds ``FlexState``, a
``dict`` subclass, which torch's safe unpickler refuses to fill. Unrestricted pickle
(``weights_only=False``) would run whatever a tampered file names.

:func:`load_state_file` checks the file before it allocates anything the file asks for:

- a regular file (not a directory, device or pipe) of at most :data:`MAX_STATE_FILE_BYTES`;
- an archive of at most :data:`MAX_ARCHIVE_MEMBERS` members listed in at most
  :data:`MAX_DIRECTORY_BYTES` (read from its end record before ``zipfile`` parses the list),
  all stored uncompressed and unencrypted under one top-level folder, with one ``data.pkl``
  of at most :data:`MAX_PICKLE_BYTES`, written little-endian;
- every storage the pickle asks for declares (in its persistent id) exactly the bytes its
  archive member holds, and all of them together at most :data:`MAX_STORAGE_BYTES`.

The pickle is read with an unpickler that admits only what a loader state holds, the same
allowlist as Megatron-Bridge's ``energon_torch_load`` (:data:`ALLOWED_GLOBALS`: Python's plain
containers and scalars, NumPy arrays, torch tensors and Energon's own state classes), each
through a guarded stand-in (:mod:`energon_plugins.loading.safe_unpickler`) that refuses
arguments that would allocate more than the file holds. Anything else, and any truncated,
corrupt or foreign file, is a :class:`StateFileError` naming the file.
"""

import io
import os
import pickle
import stat
import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from energon_plugins.errors import EnergonPluginsError
from energon_plugins.loading.safe_unpickler import (
    ALLOWED_GLOBALS,
    Corrupt,
    Refused,
    RestrictedUnpickler,
    StorageRequest,
)
from energon_plugins.loading.state_store import ObjectTooLargeError, is_remote, location, read_bytes

__all__ = [
    "ALLOWED_GLOBALS",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_DIRECTORY_BYTES",
    "MAX_PICKLE_BYTES",
    "MAX_STATE_FILE_BYTES",
    "MAX_STORAGE_BYTES",
    "StateFileError",
    "load_state_file",
]

MAX_STATE_FILE_BYTES = 384 * 2**20
"""Largest loader state file read (a real one is kilobytes to a few megabytes)."""
MAX_PICKLE_BYTES = 64 * 2**20
"""Largest ``data.pkl`` member read."""
MAX_STORAGE_BYTES = 256 * 2**20
"""Most bytes all tensor storages of one state file may declare together."""
MAX_ARCHIVE_MEMBERS = 10_000
"""Most members the archive's central directory may list (checked before it is parsed)."""
MAX_DIRECTORY_BYTES = 8 * 2**20
"""Largest central directory (the list of members) read: ``zipfile`` reads it whole."""


class StateFileError(EnergonPluginsError, ValueError):
    """A loader state file is truncated, corrupt, too large, not a ``torch.save`` file, or holds
    objects a loader state never contains."""


_END_RECORD = struct.Struct("<4s4H2LH")  # end of central directory
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_ZIP64_RECORD = struct.Struct("<4sQ2H2L4Q")
_ZIP64_RECORD_SIGNATURE = b"PK\x06\x06"
_ENCRYPTED = 0x1

_READ_ERRORS = (
    pickle.UnpicklingError,
    zipfile.BadZipFile,
    struct.error,
    KeyError,
    EOFError,
    OSError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    RuntimeError,
    OverflowError,
    NotImplementedError,
    MemoryError,
    RecursionError,
)


def load_state_file(path: "str | os.PathLike[str]") -> Any:
    """Read a ``torch.save`` file through the restricted unpickler (tensors land on the CPU).

    ``path`` may be on an object store (``msc://PROFILE/...``, see
    :mod:`~energon_plugins.loading.state_store`): its size is checked from the object's metadata
    first, then its bytes go through the same checks as a local file's.

    Raises:
        FileNotFoundError: nothing exists at ``path``.
        StateStoreError: the object store refused or cannot be reached (names URL and profile).
        StateFileError: the path is not a regular file, is too large, cannot be read, is
            truncated or corrupt, was not written by ``torch.save``, declares storages that
            disagree with its bytes or exceed :data:`MAX_STORAGE_BYTES`, or references an
            object outside :data:`ALLOWED_GLOBALS`. The message names the file.
    """
    where = os.fspath(path)
    opened = _fetch_state_object(path, where) if is_remote(path) else _open_state_file(path, where)
    with opened as fh:
        _check_directory_size(fh, where)
        try:
            archive = zipfile.ZipFile(fh)
        except _READ_ERRORS as exc:
            raise _unreadable(where, exc) from exc
        with archive:
            return _read_archive(archive, where)


@contextmanager
def _fetch_state_object(path: "str | os.PathLike[str]", where: str) -> Iterator[IO[bytes]]:
    """An object store's state file, downloaded into memory once its metadata shows an object
    of at most :data:`MAX_STATE_FILE_BYTES` (a larger one is refused before any byte of it is
    requested)."""
    try:
        data = read_bytes(location(path), MAX_STATE_FILE_BYTES)
    except ObjectTooLargeError as exc:
        raise StateFileError(
            f"{where!r} is {exc.size:,} bytes, more than the {MAX_STATE_FILE_BYTES:,} a "
            "loader state file may have; refusing to read it"
        ) from exc
    except IsADirectoryError as exc:
        raise StateFileError(f"{where!r} is a directory, not a loader state file") from exc
    with io.BytesIO(data) as fh:
        yield fh


@contextmanager
def _open_state_file(path: "str | os.PathLike[str]", where: str) -> Iterator[IO[bytes]]:
    """The file, opened without blocking (a FIFO would), once it is known to be a regular file
    no larger than :data:`MAX_STATE_FILE_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.isdir(path):
            raise StateFileError(f"{where!r} is a directory, not a loader state file") from exc
        raise StateFileError(f"cannot read loader state file {where!r}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise StateFileError(f"{where!r} is a directory, not a loader state file")
        if not stat.S_ISREG(info.st_mode):
            raise StateFileError(
                f"{where!r} is not a regular file (a device, pipe or socket); a loader state file "
                "is what torch.save writes"
            )
        if info.st_size > MAX_STATE_FILE_BYTES:
            raise StateFileError(
                f"{where!r} is {info.st_size:,} bytes, more than the {MAX_STATE_FILE_BYTES:,} a "
                "loader state file may have; refusing to read it"
            )
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def _check_directory_size(fh: IO[bytes], where: str) -> None:
    """Refuse an archive whose central directory lists more than :data:`MAX_ARCHIVE_MEMBERS`
    members, read from its end record (and zip64 record) before ``zipfile`` parses it."""
    size = fh.seek(0, os.SEEK_END)
    tail_start = max(0, size - (_END_RECORD.size + 0xFFFF))
    fh.seek(tail_start)
    tail = fh.read()
    at = tail.rfind(_END_SIGNATURE)
    if at < 0 or len(tail) - at < _END_RECORD.size:
        raise StateFileError(
            f"cannot read loader state file {where!r}: it is truncated, corrupt, or not written "
            "by torch.save (no zip end record)"
        )
    end = _END_RECORD.unpack_from(tail, at)
    members, directory = end[4], end[5]
    locator_at = at - _ZIP64_LOCATOR.size
    if locator_at >= 0 and tail[locator_at : locator_at + 4] == _ZIP64_LOCATOR_SIGNATURE:
        record_offset = _ZIP64_LOCATOR.unpack_from(tail, locator_at)[2]
        if record_offset + _ZIP64_RECORD.size <= size:
            fh.seek(record_offset)
            record = fh.read(_ZIP64_RECORD.size)
            if record[:4] == _ZIP64_RECORD_SIGNATURE:
                zip64 = _ZIP64_RECORD.unpack(record)
                members, directory = max(members, zip64[7]), max(directory, zip64[8])
    if members > MAX_ARCHIVE_MEMBERS:
        raise StateFileError(
            f"{where!r} lists {members:,} archive members, more than the {MAX_ARCHIVE_MEMBERS:,} "
            "a loader state file may have; refusing to read it"
        )
    if directory > MAX_DIRECTORY_BYTES:
        raise StateFileError(
            f"{where!r} has a {directory:,}-byte list of archive members, more than the "
            f"{MAX_DIRECTORY_BYTES:,} a loader state file may have; refusing to read it"
        )
    fh.seek(0)


def _unreadable(where: str, exc: BaseException) -> StateFileError:
    text = " ".join(str(exc).split())[:200]
    return StateFileError(
        f"cannot read loader state file {where!r}: it is truncated, corrupt, or not written by "
        f"torch.save ({type(exc).__name__}: {text})"
    )


def _read_archive(archive: zipfile.ZipFile, where: str) -> Any:
    """Check the members of a ``torch.save`` archive, then unpickle its ``data.pkl``."""
    members = archive.infolist()
    pickles = [m for m in members if m.filename.rsplit("/", 1)[-1] == "data.pkl"]
    if not pickles:
        raise StateFileError(f"{where!r} is a zip archive but not a torch.save file (no data.pkl inside)")
    prefix = pickles[0].filename[: -len("data.pkl")]
    for member in members:
        problem = _member_problem(member, prefix)
        if problem is not None:
            raise StateFileError(f"{where!r} is not a loader state file: {problem}")
    if len(pickles) > 1:
        names = ", ".join(repr(m.filename) for m in pickles[:3])
        raise StateFileError(f"{where!r} is not a loader state file: it holds several pickles ({names})")
    if pickles[0].file_size > MAX_PICKLE_BYTES:
        raise StateFileError(
            f"{where!r} holds a {pickles[0].file_size:,}-byte pickle, more than the "
            f"{MAX_PICKLE_BYTES:,} a loader state may have; refusing to read it"
        )
    by_name = {m.filename: m for m in members}
    try:
        byteorder = by_name.get(f"{prefix}byteorder")
        order = archive.read(byteorder) if byteorder is not None and byteorder.file_size <= 16 else b"?"
        if byteorder is not None and order not in (b"little", b""):
            raise StateFileError(
                f"{where!r} was not written on a little-endian machine (its byteorder record says "
                f"{order!r}); only little-endian loader states are read"
            )
        reader = _StorageReader(archive, by_name, prefix)
        return RestrictedUnpickler(archive.read(pickles[0]), reader.read).load()
    except Refused as exc:
        raise StateFileError(
            f"{where!r} is not a loader state: it references {exc.what}, which a loader state "
            "never holds (allowed: Python containers and scalars, NumPy arrays, torch tensors, "
            "Energon's state classes); refusing to load it"
        ) from exc
    except Corrupt as exc:
        raise StateFileError(f"{where!r} is not a loader state file: {exc}") from exc
    except _READ_ERRORS as exc:
        text = " ".join(str(exc).split())[:200]
        raise StateFileError(
            f"cannot read loader state file {where!r}: it is truncated or corrupt "
            f"({type(exc).__name__}: {text})"
        ) from exc


def _member_problem(member: zipfile.ZipInfo, prefix: str) -> str | None:
    """Why ``member`` cannot be part of a ``torch.save`` archive under ``prefix`` (or ``None``)."""
    name = member.filename
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or ".." in parts or (len(name) > 1 and name[1] == ":"):
        return f"its member {name[:80]!r} points outside the archive"
    if not name.startswith(prefix):
        return f"its member {name[:80]!r} lies outside the archive's folder {prefix!r}"
    if member.flag_bits & _ENCRYPTED:
        return f"its member {name[:80]!r} is encrypted"
    if member.compress_type != zipfile.ZIP_STORED:
        return (
            f"its member {name[:80]!r} is compressed (method {member.compress_type}); torch.save "
            "stores members uncompressed"
        )
    if member.file_size != member.compress_size:
        return (
            f"its member {name[:80]!r} declares {member.file_size:,} bytes but stores "
            f"{member.compress_size:,}"
        )
    return None


class _StorageReader:
    """Reads the storages a pickle asks for, checking each declared size first."""

    def __init__(self, archive: zipfile.ZipFile, members: dict[str, zipfile.ZipInfo], prefix: str) -> None:
        self.archive, self.members, self.prefix = archive, members, prefix
        self.total = 0

    def read(self, request: StorageRequest) -> bytearray:
        """The bytes of ``request``'s storage, once its declared size matches its member."""
        if request.nbytes > MAX_STORAGE_BYTES - self.total:
            raise Corrupt(
                f"its storages declare {self.total + request.nbytes:,} bytes, more than the "
                f"{MAX_STORAGE_BYTES:,} a loader state may hold (storage {request.key!r}: "
                f"{request.numel:,} elements of {request.itemsize} bytes)"
            )
        member = self.members.get(f"{self.prefix}data/{request.key}")
        if member is None:
            raise Corrupt(f"the pickle names storage {request.key!r}, which the archive does not hold")
        if member.file_size != request.nbytes:
            raise Corrupt(
                f"storage {request.key!r} declares {request.numel:,} elements ({request.nbytes:,} "
                f"bytes) but its archive member holds {member.file_size:,} bytes"
            )
        self.total += request.nbytes
        data = bytearray(member.file_size)
        with self.archive.open(member) as fh:  # a ZipExtFile: a buffered reader
            got = fh.readinto(data)  # type: ignore[attr-defined]
            fh.read(1)  # reaching the end checks the CRC
        if got != member.file_size:
            raise Corrupt(f"storage {request.key!r} is truncated ({got:,} of {member.file_size:,} bytes)")
        return data
