"""Helpers source readers share: turns in any common chat layout, image bytes, file lists.

Image files are read through :mod:`~energon_plugins.convert.formats.media` (containment in
the media folder, regular files only, a size cap).

Import-light (no PIL, no pyarrow); every function raises
:class:`~energon_plugins.convert.records.RecordError` for a record it cannot read.
"""

import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

from energon_plugins.config.remote_urls import clean_url, is_msc, parent_url
from energon_plugins.convert.formats.audio import DEFAULT_AUDIO_TOKEN
from energon_plugins.convert.formats.media import check_size, current_media_limits, read_media_file
from energon_plugins.convert.records import RecordError
from energon_plugins.encoding.chat.conversation import GPT_ROLES

DEFAULT_IMAGE_TOKEN = "<image>"


def image_token_of(context: Any) -> str:
    """The image placeholder of a build context's sample config (``<image>`` without one)."""
    config = getattr(context, "sample_config", None)
    return getattr(config, "image_token", None) or DEFAULT_IMAGE_TOKEN


def _content_text(content: Any, image_token: str, where: str, audio_token: str = DEFAULT_AUDIO_TOKEN) -> str:
    """A turn's content as text: a string, or typed parts (text, and images and audio clips as
    placeholders)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, str)):
        pieces = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif kind == "image":
                pieces.append(image_token)
            elif kind == "audio":
                pieces.append(audio_token)
            else:
                raise RecordError(
                    "malformed", f"{where}.content[{j}] is not a text, image or audio part: {part!r:.80}"
                )
        return "\n".join(pieces)
    raise RecordError("malformed", f"{where}.content is {type(content).__name__}, not text")


def normalize_turns(
    raw: Any,
    *,
    field: str,
    image_token: str = DEFAULT_IMAGE_TOKEN,
    audio_token: str = DEFAULT_AUDIO_TOKEN,
) -> list[dict[str, str]]:
    """Turns in GPT style (``from``/``value``) or ChatML style (``role``/``content``, the
    content a string or typed parts ``[{"type": "image"}, {"type": "audio"}, {"type": "text",
    "text": ...}]``) -> ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``.

    ``field`` names the record field in error messages. Typed parts are joined with a newline,
    each image part becoming ``image_token`` and each audio part ``audio_token``.

    Raises:
        RecordError: ``malformed`` (not a list of turns, a turn without text), ``roles``
            (a speaker that is not human/user, gpt/assistant or system).
    """
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
        raise RecordError("malformed", f"{field} is not a non-empty list of turns")
    turns = []
    for i, turn in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(turn, dict):
            raise RecordError("malformed", f"{where} is {type(turn).__name__}, not an object")
        if "from" in turn:
            speaker, content = turn.get("from"), turn.get("value")
        elif "role" in turn:
            speaker, content = turn.get("role"), turn.get("content")
        else:
            raise RecordError("malformed", f"{where} has neither 'from'/'value' nor 'role'/'content'")
        role = GPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise RecordError(
                "roles", f"{where}: unknown speaker {speaker!r}; expected one of {sorted(GPT_ROLES)}"
            )
        turns.append({"role": role, "content": _content_text(content, image_token, where, audio_token)})
    return turns


def as_list(value: Any) -> list[Any]:
    """``None`` -> ``[]``, a list (or tuple) as is, anything else as a one-item list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def read_image_file(folder: str | os.PathLike, name: str, where: str) -> bytes:
    """The bytes of image ``name`` (relative to ``folder``, or absolute), read only when it
    lies inside ``folder`` (symlinks resolved) or a root ``--allow-outside`` allows, is a
    regular file and is no larger than the image cap in force (see
    :mod:`~energon_plugins.convert.formats.media`). ``where`` names the record field. A
    ``folder`` given as an ``msc://`` URL (a ``str``) is a folder on object storage.

    Raises:
        RecordError: ``url``, ``outside_folder``, ``not_a_file``, ``too_large`` (the file is
            never opened), ``missing_image`` (no such file, unreadable or empty), each message
            naming ``where`` and the path.
    """
    if not isinstance(name, str):
        raise RecordError("malformed", f"{where}: an image path is {type(name).__name__}, not text")
    return read_media_file(folder, name, where)


def image_bytes(value: Any, folder: str | os.PathLike, where: str) -> bytes:
    """An image given as bytes, as a path (str), or as a Hugging Face image struct
    ``{"bytes": ..., "path": ...}`` (bytes win; a path is read with :func:`read_image_file`).

    Raises:
        RecordError: ``missing_image`` (no bytes and no readable path), ``too_large`` (bytes
            over the image cap), ``malformed`` (another type), or what :func:`read_image_file`
            raises.
    """
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        if value.get("bytes"):
            value = value["bytes"]
        elif value.get("path"):
            return read_image_file(folder, value["path"], f"{where}.path")
        else:
            raise RecordError("missing_image", f"{where}: image has neither bytes nor a path")
    if isinstance(value, (bytes, bytearray, memoryview)):
        if not value:
            raise RecordError("missing_image", f"{where}: empty image bytes")
        check_size(len(value), where, "the embedded image", current_media_limits())
        return bytes(value)
    if isinstance(value, str):
        if not value:
            raise RecordError("missing_image", f"{where}: empty image path")
        return read_image_file(folder, value, where)
    if value is None:
        raise RecordError("missing_image", f"{where}: image is null")
    raise RecordError(
        "malformed", f"{where}: an image is {type(value).__name__}, expected a path, bytes or {{bytes, path}}"
    )


def media_folder(option: str | None, source_file: pathlib.Path, origin: Any = None) -> str:
    """The folder a source file's media paths are relative to: ``option`` (a local folder,
    resolved, or an ``msc://`` URL), else the folder the file is in; for a local copy of a
    remote source (``origin``, a :class:`~energon_plugins.convert.staging.SourceCopy`) that is
    the remote folder the file came from."""
    if option:
        return clean_url(option) if is_msc(option) else str(pathlib.Path(option).expanduser().resolve())
    if origin is not None:
        return parent_url(origin.url_of(source_file))
    return str(pathlib.Path(source_file).parent.expanduser().resolve())


def source_files(source: pathlib.Path, suffixes: tuple[str, ...]) -> Iterator[tuple[pathlib.Path, str]]:
    """``(path, label)`` of ``source`` itself (a file), or of every file under the folder
    ``source`` whose name ends with one of ``suffixes``, in sorted order; ``label`` is the path
    relative to the folder (the file name for a single file)."""
    if source.is_file():
        yield source, source.name
        return
    for path in sorted(p for p in source.rglob("*") if p.is_file() and p.name.endswith(suffixes)):
        yield path, path.relative_to(source).as_posix()
