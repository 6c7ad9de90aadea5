"""Reading a record's media from a media folder on object storage (``msc://PROFILE/prefix``),
with the guarantees a local folder gives (:mod:`~energon_plugins.convert.formats.media`).

The record's path is a relative POSIX path, normalised (``a/./b``, ``a/../b``) before anything
is requested. Refused without any request to the store, each a rejected record with its reason:

- ``url``: the name is a URL (``http://``, ``s3://``, ``msc://``, ...);
- ``outside_folder``: an absolute path (``/x.jpg``: a remote folder's media are named
  relative to it), or a path that leaves the folder once normalised (``../x.jpg``).

Then one metadata request (``HEAD``) for the object: ``missing_image`` (or ``missing_audio``)
when there is none, ``not_a_file`` for a folder (a prefix); a storage-client link (an object whose metadata names
a target, as ``msc`` writes symlinks) is followed by its metadata only, at most
:data:`MAX_LINKS` deep, and refused as ``outside_folder`` when its target leaves the folder;
``too_large`` when the object's size is over the cap. Only then is it read, as one ranged read
of at most the cap plus one byte (so an object replaced by a larger one meanwhile is still
refused). A failure of the store itself (refused credentials, no answer) is no record's fault:
it stops the run with a :class:`~energon_plugins.convert.storage.ConvertStorageError` naming the
URL, and ``--resume`` continues once the store answers.
"""

import contextlib
import posixpath

from energon_plugins.config.remote_urls import MSC_PREFIX, split_url
from energon_plugins.convert.formats.media import MediaLimits, check_size, is_url
from energon_plugins.convert.records import RecordError
from energon_plugins.convert.storage import inside, resolve, storage_errors

MAX_LINKS = 8
"""Links (storage-client symlinks) followed from one media path."""


def _absolute(name: str) -> bool:
    return name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":" and name[0].isalpha())


def remote_media_key(folder: str, name: str, where: str) -> tuple[str, str]:
    """``(path inside the profile, its URL)`` of media ``name`` of a record under the remote
    ``folder``, after the checks that need no request.

    Raises:
        RecordError: ``url``, ``outside_folder`` (absolute, or leaving the folder),
            ``not_a_file`` (the folder itself).
    """
    if is_url(name):
        raise RecordError(
            "url", f"{where}: {name!r} is a URL; give paths relative to the media folder {folder}"
        )
    if _absolute(name):
        raise RecordError(
            "outside_folder",
            f"{where}: {name!r} is an absolute path; the media of the remote folder {folder} are "
            "named relative to it",
        )
    relative = posixpath.normpath(name)
    profile, prefix = split_url(folder)
    if relative == ".." or relative.startswith("../"):
        raise RecordError(
            "outside_folder", f"{where}: {name!r} leads outside the media folder {folder} (as {relative!r})"
        )
    if relative == ".":
        raise RecordError(
            "not_a_file", f"{where}: {name!r} names the media folder {folder} itself, not a file"
        )
    key = f"{prefix}/{relative}" if prefix else relative
    return key, f"{MSC_PREFIX}{profile}/{key}"


def read_remote_media(folder: str, name: str, where: str, limits: MediaLimits, kind: str = "image") -> bytes:
    """The bytes of media ``name`` of a record under the remote media folder ``folder`` (an
    ``msc://`` URL), under ``limits``; see the module's checks. ``kind`` (``image`` or
    ``audio``) names the medium in the messages and the reason of a missing object.

    Raises:
        RecordError: ``url``, ``outside_folder``, ``not_a_file``, ``too_large`` (never read),
            ``missing_image`` / ``missing_audio`` (no such object, or an empty one).
        ConvertStorageError: the store failed (not the record).
    """
    from multistorageclient.types import Range

    key, url = remote_media_key(folder, name, where)
    what = "an image" if kind == "image" else f"the {kind} file"
    client, prefix = resolve(folder, "the media folder")
    profile = split_url(folder)[0]
    for _ in range(MAX_LINKS + 1):
        meta = None
        with storage_errors(url, what), contextlib.suppress(FileNotFoundError):
            meta = client.info(key)
        if meta is None:
            raise RecordError(f"missing_{kind}", f"{where}: no {kind} at {url}")
        if meta.type != "file":
            raise RecordError("not_a_file", f"{where}: {url} is a folder, not a file")
        if not meta.symlink_target:
            break
        target = posixpath.normpath(posixpath.join(posixpath.dirname(key), meta.symlink_target))
        if not inside(target, prefix) or target.startswith("../"):
            raise RecordError(
                "outside_folder",
                f"{where}: {url} links to {MSC_PREFIX}{profile}/{target}, outside the media folder {folder}",
            )
        key, url = target, f"{MSC_PREFIX}{profile}/{target}"
    else:
        raise RecordError("not_a_file", f"{where}: {url}: more than {MAX_LINKS} links in a row")
    check_size(int(meta.content_length or 0), where, url, limits)
    if not meta.content_length:
        raise RecordError(f"missing_{kind}", f"{where}: {url} is empty")
    data = None
    with storage_errors(url, what), contextlib.suppress(FileNotFoundError):
        data = bytes(client.read(key, byte_range=Range(offset=0, size=limits.max_image_size + 1)))
    if data is None:
        raise RecordError(f"missing_{kind}", f"{where}: no {kind} at {url} (removed meanwhile)")
    check_size(len(data), where, f"{url} (read)", limits)
    if not data:
        raise RecordError(f"missing_{kind}", f"{where}: {url} is empty")
    return data
