"""A record's audio clips: paths, bytes or Hugging Face ``Audio`` structs -> :class:`AudioClip`.

A clip is stored as a numbered part with its file's own extension (``0.wav``, ``1.flac``, ...),
what the encoders' cooker reads (:data:`energon_plugins.encoding.chat.chatml.AUDIO_EXTENSIONS`);
a video file (``.mp4``, ``.mkv``, ...) gives its sound track, stored as ``N.audio.mp4`` (never
read as a video part); a file with another extension is refused (``audio_format``) before it
is opened. Audio files
are read through :func:`~energon_plugins.convert.formats.media.read_media_file`, so they obey
the image rules: inside the media folder (symlinks resolved) or an ``--allow-outside`` root,
regular files, under the size cap. Embedded bytes without a file name get the extension of
their container when the record is checked (:func:`~energon_plugins.convert.checks.check_audio`).

Import-light (standard library only).
"""

import os
import posixpath
from typing import Any

from energon_plugins.convert.formats.media import check_size, current_media_limits, read_media_file
from energon_plugins.convert.records import AudioClip, RecordError

DEFAULT_AUDIO_TOKEN = "<audio>"
"""The audio placeholder in conversation text (the ``hf-processor`` encoder's ``audio.tag``)."""

AUDIO_EXTENSIONS = ("wav", "flac", "mp3", "m4a", "ogg")
"""The extensions an audio part may have (the encoders' ``AUDIO_EXTENSIONS``, kept equal by a
test; written here so that reading a source imports no Energon)."""


VIDEO_EXTENSIONS = ("mp4", "webm", "mkv", "mov", "avi", "flv")
"""Video containers whose sound track may be a clip (the encoders' ``VIDEO_EXTENSIONS``)."""

AUDIO_IN_VIDEO = "audio"
"""The infix of a clip held in a video container: ``0.audio.mp4`` (the encoders' cooker's)."""


def audio_token_of(context: Any) -> str:
    """The audio placeholder of a build context: its ``extra["audio_token"]`` (what ``convert
    --audio-token`` sets), else its sample config's ``audio_token``, else ``<audio>``."""
    extra = getattr(context, "extra", None) or {}
    config = getattr(context, "sample_config", None)
    return extra.get("audio_token") or getattr(config, "audio_token", None) or DEFAULT_AUDIO_TOKEN


def audio_extension(name: str, where: str) -> str | None:
    """The part extension of the audio file ``name`` (lower case; ``audio.mp4`` for a video
    file, whose sound track is the clip); None when it has none.

    Raises:
        RecordError: ``audio_format``, an extension other than :data:`AUDIO_EXTENSIONS` and
            :data:`VIDEO_EXTENSIONS`, naming ``where`` and the file.
    """
    suffix = posixpath.splitext(name.replace("\\", "/"))[1].lstrip(".").lower()
    if not suffix:
        return None
    if suffix in VIDEO_EXTENSIONS:
        return f"{AUDIO_IN_VIDEO}.{suffix}"
    if suffix not in AUDIO_EXTENSIONS:
        raise RecordError(
            "audio_format",
            f"{where}: {name!r} is a .{suffix} file; audio clips must be one of "
            f"{', '.join(AUDIO_EXTENSIONS)} or a video's sound track "
            f"({', '.join(VIDEO_EXTENSIONS)}) (convert it first, e.g. with ffmpeg)",
        )
    return suffix


def read_audio_file(folder: str | os.PathLike, name: Any, where: str) -> AudioClip:
    """The audio file ``name`` of a record (relative to ``folder``, or absolute) as a clip,
    read under the media rules in force; its extension is checked before anything is opened.

    Raises:
        RecordError: ``malformed`` (not a path), ``missing_audio`` (empty path, no such file,
            an empty file), ``audio_format`` (no extension, or another one), and the reasons of
            :func:`~energon_plugins.convert.formats.media.read_media_file`.
    """
    if not isinstance(name, str):
        raise RecordError("malformed", f"{where}: an audio path is {type(name).__name__}, not text")
    if not name:
        raise RecordError("missing_audio", f"{where}: empty audio path")
    extension = audio_extension(name, where)
    if extension is None:
        raise RecordError(
            "audio_format",
            f"{where}: {name!r} has no extension; audio files must end in one of {', '.join(AUDIO_EXTENSIONS)}",
        )
    return AudioClip(extension, read_media_file(folder, name, where, kind="audio"))


def audio_clip(value: Any, folder: str | os.PathLike, where: str) -> AudioClip:
    """An audio clip given as a path (str), as bytes, or as a Hugging Face ``Audio`` struct
    ``{"bytes": ..., "path": ...}`` (bytes win, stored under the path's extension when it has
    one; a path alone is read with :func:`read_audio_file`).

    Raises:
        RecordError: ``missing_audio`` (null, empty, no bytes and no path), ``audio_format``,
            ``too_large`` (bytes over the cap), ``malformed`` (another type), or what
            :func:`read_audio_file` raises.
    """
    extension = None
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        name = value.get("path")
        if value.get("bytes"):
            if isinstance(name, str) and name:
                extension = audio_extension(name, f"{where}.path")
            value = value["bytes"]
        elif name:
            return read_audio_file(folder, name, f"{where}.path")
        else:
            raise RecordError("missing_audio", f"{where}: audio has neither bytes nor a path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        if not value:
            raise RecordError("missing_audio", f"{where}: empty audio bytes")
        check_size(len(value), where, "the embedded audio", current_media_limits())
        return AudioClip(extension, bytes(value))
    if isinstance(value, str):
        return read_audio_file(folder, value, where)
    if value is None:
        raise RecordError("missing_audio", f"{where}: audio is null")
    raise RecordError(
        "malformed",
        f"{where}: an audio clip is {type(value).__name__}, expected a path, bytes or {{bytes, path}}",
    )


def audio_clips(value: Any, folder: str | os.PathLike, field: str) -> list[AudioClip]:
    """The clips of a record field holding one clip or a list of them (None: no clips);
    ``field`` names it in messages (``audio``, ``audios[1]``)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [audio_clip(item, folder, f"{field}[{i}]") for i, item in enumerate(value)]
    return [audio_clip(value, folder, field)]
