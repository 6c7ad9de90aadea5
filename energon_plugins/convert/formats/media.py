"""Reading a record's media file safely: inside the media folder, a regular file, under a cap.

A source's JSON (or CSV, or parquet) names image files; :func:`read_media_file` reads one only
when every check passes, each failure being a rejected record with its own reason:

- ``url``: the name is a URL (``http://``, ``s3://``, ``file://``, ...); nothing is fetched;
- ``outside_folder``: the path, with every symlink resolved, lies outside the media folder
  (and outside every extra root of :attr:`MediaLimits.allowed_roots`): ``../x.jpg``,
  ``/etc/hostname``, a symlink in the folder pointing elsewhere;
- ``not_a_file``: a directory, a device (``/dev/zero``), a FIFO or a socket;
- ``too_large``: larger than :attr:`MediaLimits.max_image_size`, known from ``stat``.

None of these opens the file. A file that passes is opened without following a final symlink
and without blocking, checked again on the open descriptor (so a file swapped after the check
is still refused), and read up to the cap plus one byte (so a file growing meanwhile cannot
exceed it).

The limits in force are a context (:func:`media_limits`), set by ``convert`` around each
record's ``load``, so that a plugin reader calling :func:`read_image_file
<energon_plugins.convert.formats.common.read_image_file>` obeys the user's settings too;
outside a conversion the defaults apply. A media folder on object storage (``msc://...``) is
read by :mod:`~energon_plugins.convert.formats.remote_media` under the same limits.
Import-light (standard library only).
"""

import contextlib
import contextvars
import dataclasses
import os
import re
import stat
from collections.abc import Iterator

from energon_plugins.convert.records import RecordError

DEFAULT_MAX_IMAGE_SIZE = 64 * 2**20
"""The largest image file (or embedded image bytes) read, in bytes: 64 MiB."""
DEFAULT_MAX_IMAGE_PIXELS = 8192 * 8192
"""The most pixels an image may declare in its header (64 Mi pixels, 8192 x 8192)."""

MSC_PREFIX = "msc://"
"""A media folder on object storage (multi-storage-client's URLs)."""
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclasses.dataclass(frozen=True)
class MediaLimits:
    """What a record's media may be.

    Attributes:
        max_image_size: the largest image file or embedded image bytes, in bytes.
        max_image_pixels: the most pixels (width x height) an image header may declare.
        allowed_roots: resolved folders media may come from besides the record's media
            folder (``--allow-outside``); containment still applies to each.
    """

    max_image_size: int = DEFAULT_MAX_IMAGE_SIZE
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    allowed_roots: tuple[str, ...] = ()


_LIMITS: contextvars.ContextVar[MediaLimits] = contextvars.ContextVar(
    "energon_plugins_media_limits", default=MediaLimits()
)


def current_media_limits() -> MediaLimits:
    """The limits in force (the defaults outside :func:`media_limits`)."""
    return _LIMITS.get()


@contextlib.contextmanager
def media_limits(limits: MediaLimits | None) -> Iterator[MediaLimits]:
    """Put ``limits`` in force inside the ``with`` block (None: leave them as they are)."""
    if limits is None:
        yield current_media_limits()
        return
    token = _LIMITS.set(limits)
    try:
        yield limits
    finally:
        _LIMITS.reset(token)


def is_url(name: str) -> bool:
    """Whether ``name`` starts with a URL scheme (``http://``, ``s3://``, ``file://``, ...)."""
    return bool(_URL.match(name))


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_size(size: int, where: str, what: str, limits: MediaLimits) -> None:
    """Refuse ``size`` bytes over the cap.

    Raises:
        RecordError: ``too_large``, naming ``where`` (the record field) and ``what``.
    """
    if size > limits.max_image_size:
        raise RecordError(
            "too_large",
            f"{where}: {what} is {size} bytes, more than the "
            f"{limits.max_image_size} allowed (--max-image-size)",
        )


def resolve_media_path(folder: str | os.PathLike, name: str, where: str, limits: MediaLimits) -> str:
    """The real path (symlinks resolved) of media ``name`` of a record, relative to ``folder``
    (or absolute), after checking it is no URL and lies inside ``folder`` or an allowed root.

    Raises:
        RecordError: ``url``, ``outside_folder``.
    """
    if is_url(name):
        raise RecordError(
            "url", f"{where}: {name!r} is a URL; convert reads local files only (download the media first)"
        )
    root = os.path.realpath(os.fspath(folder))
    path = os.path.realpath(os.path.join(root, name))
    roots = (root, *(os.path.realpath(extra) for extra in limits.allowed_roots))
    if not any(_inside(path, allowed) for allowed in roots):
        raise RecordError(
            "outside_folder",
            f"{where}: {name!r} resolves to {path!r}, outside the media "
            f"folder {root!r} (pass --allow-outside DIR to also read from DIR)",
        )
    return path


def read_media_file(
    folder: str | os.PathLike,
    name: str,
    where: str,
    limits: MediaLimits | None = None,
    kind: str = "image",
) -> bytes:
    """The bytes of media file ``name`` of a record (relative to ``folder``, or absolute),
    under ``limits`` (default: those in force); see the module's checks. A ``folder`` given as
    an ``msc://`` URL is read from object storage with the same guarantees
    (:mod:`~energon_plugins.convert.formats.remote_media`). ``kind`` (``image`` or ``audio``)
    names the medium in the messages and the reason of a missing file.

    Raises:
        RecordError: ``url``, ``outside_folder``, ``not_a_file``, ``too_large`` (the file is
            not opened), ``missing_image`` / ``missing_audio`` (no such file, unreadable, empty).
    """
    limits = limits or current_media_limits()
    if "\0" in name:
        raise RecordError("malformed", f"{where}: the path {name!r} holds a NUL character")
    if isinstance(folder, str) and folder.startswith(MSC_PREFIX):  # a folder on object storage
        from energon_plugins.convert.formats.remote_media import read_remote_media

        return read_remote_media(folder, name, where, limits, kind)
    path = resolve_media_path(folder, name, where, limits)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise RecordError(
            f"missing_{kind}", f"{where}: cannot read {kind} {path!r}: {exc.strerror or exc}"
        ) from None
    _check_regular(info, path, where, limits)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise RecordError(
            f"missing_{kind}", f"{where}: cannot read {kind} {path!r}: {exc.strerror or exc}"
        ) from None
    with os.fdopen(fd, "rb") as fh:
        _check_regular(os.fstat(fd), path, where, limits)  # the file opened is the one checked
        data = fh.read(limits.max_image_size + 1)
    check_size(len(data), where, f"{path!r} (read)", limits)
    if not data:
        raise RecordError(f"missing_{kind}", f"{where}: {path!r} is empty")
    return data


def _check_regular(info: os.stat_result, path: str, where: str, limits: MediaLimits) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise RecordError("not_a_file", f"{where}: {path!r} is {_kind(info.st_mode)}, not a regular file")
    check_size(info.st_size, where, repr(path), limits)
