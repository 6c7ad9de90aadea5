"""The ``llava-json`` and ``sharegpt`` source formats: conversations in JSON or JSON Lines.

- ``llava-json``: LLaVA's instruction-tuning layout, records
  ``{"id": ..., "image": "coco/x.jpg" (or "images": [...]), "conversations": [{"from":
  "human", "value": "<image>\\n..."}, {"from": "gpt", "value": ...}, ...]}`` with image paths
  relative to an image folder; a record without an image is a text-only conversation.
- ``sharegpt``: ShareGPT-style records, the turns under ``messages`` or ``conversations``, as
  ``from``/``value`` or ``role``/``content`` (content as text or typed parts), an optional
  top-level ``system`` prompt, and optional ``images`` (or ``image``) paths.

Both read audio the way they read images: ``audios`` (LLaMA-Factory's ShareGPT key), else
``audio``, one path or a list of them relative to the same media folder, one ``<audio>``
placeholder (or ``{"type": "audio"}`` part) per clip
(:mod:`~energon_plugins.convert.formats.audio`).

A source is one ``.json`` / ``.jsonl`` file or a folder of them (read in sorted order). The
image folder may be on object storage (``-o image_folder=msc://PROFILE/...``).
"""

import pathlib
from collections.abc import Iterator
from typing import Any

from energon_plugins.convert.formats.audio import DEFAULT_AUDIO_TOKEN, audio_clips, audio_token_of
from energon_plugins.convert.formats.common import (
    as_list,
    image_bytes,
    image_token_of,
    media_folder,
    normalize_turns,
    source_files,
)
from energon_plugins.convert.formats.json_stream import decode_payload, iter_json_records
from energon_plugins.convert.formats.options import LlavaJsonOptions, ShareGPTOptions
from energon_plugins.convert.records import RecordError, SourceRecord

JSON_SUFFIXES = (".json", ".jsonl")


class JsonConversationReader:
    """Scan JSON / JSON Lines files; subclasses say which fields hold the turns, images and audio."""

    source_suffixes = JSON_SUFFIXES
    """The files of a source folder this format reads (also those copied from a remote one)."""
    source_origin: Any = None
    """Where a local copy of a remote source came from (set by ``convert``): the default media
    folder is then the remote folder of each file."""

    def __init__(self, options: Any, image_token: str, audio_token: str = DEFAULT_AUDIO_TOKEN) -> None:
        self.options = options
        self.image_token = image_token
        self.audio_token = audio_token

    def source_files(self, source: pathlib.Path) -> list[pathlib.Path]:
        """The files :meth:`scan` reads (what a resumed run checks for changes)."""
        return [path for path, _ in source_files(source, JSON_SUFFIXES)]

    def scan(self, source: pathlib.Path) -> Iterator[tuple[str, Any]]:
        """``(location, (record payload, image folder))`` for every record, in file order."""
        for path, label in source_files(source, JSON_SUFFIXES):
            folder = media_folder(self.options.image_folder, path, self.source_origin)
            for location, payload in iter_json_records(
                path, label, max_record_bytes=self.options.max_record_bytes, max_depth=self.options.max_depth
            ):
                yield location, (payload, folder)

    def load(self, payload: Any) -> SourceRecord:
        """The record's turns, image bytes and audio clips."""
        raw, folder = payload
        record = decode_payload(raw)
        ident = None if record.get("id") is None else str(record["id"])
        try:
            turns = self.turns(record)
            field = self.image_field(record)
            values = self.image_values(record)
            single = not isinstance(record.get(field), (list, tuple))
            images = [
                image_bytes(value, folder, field if single else f"{field}[{i}]")
                for i, value in enumerate(values)
            ]
            field = self.audio_field(record)
            audios = audio_clips(record.get(field), folder, field)
        except RecordError as exc:
            exc.id = ident
            raise
        return SourceRecord(turns=turns, images=images, id=ident, audios=audios)

    def turns(self, record: dict) -> list[dict[str, str]]:  # pragma: no cover - abstract
        """The record's normalised turns."""
        raise NotImplementedError

    def image_values(self, record: dict) -> list[Any]:
        """The record's images (paths, usually): the value of :meth:`image_field`."""
        return as_list(record.get(self.image_field(record)))

    def image_field(self, record: dict) -> str:
        """The record field holding the images: ``images`` if present, else ``image``."""
        return "images" if "images" in record else "image"

    def audio_field(self, record: dict) -> str:
        """The record field holding the audio clips: ``audios`` if present, else ``audio``."""
        return "audios" if "audios" in record else "audio"


class LlavaJsonReader(JsonConversationReader):
    """``llava-json``: ``conversations`` (from/value) and ``image`` (one path) or ``images``."""

    def turns(self, record: dict) -> list[dict[str, str]]:
        """``conversations``, GPT style."""
        if "conversations" not in record:
            raise RecordError("malformed", f"no 'conversations' field (fields: {sorted(record)})")
        return normalize_turns(
            record["conversations"],
            field="conversations",
            image_token=self.image_token,
            audio_token=self.audio_token,
        )


class ShareGPTReader(JsonConversationReader):
    """``sharegpt``: ``messages`` or ``conversations``, optional ``system`` and images."""

    def turns(self, record: dict) -> list[dict[str, str]]:
        """The turns, with the top-level ``system`` prompt first when there is one."""
        field = self.options.turns_field or next(
            (f for f in ("messages", "conversations") if f in record), None
        )
        if field is None or field not in record:
            wanted = self.options.turns_field or "'messages' or 'conversations'"
            raise RecordError("malformed", f"no {wanted} field (fields: {sorted(record)})")
        turns = normalize_turns(
            record[field], field=field, image_token=self.image_token, audio_token=self.audio_token
        )
        system = record.get("system")
        if isinstance(system, str) and system and turns[0]["role"] != "system":
            turns.insert(0, {"role": "system", "content": system})
        return turns

    def image_field(self, record: dict) -> str:
        """The field the options name, else ``images`` if present, else ``image``."""
        return self.options.images_field or super().image_field(record)

    def audio_field(self, record: dict) -> str:
        """The field the options name, else ``audios`` if present, else ``audio``."""
        return self.options.audios_field or super().audio_field(record)


def build_llava_json(options: LlavaJsonOptions | None, context: Any) -> LlavaJsonReader:
    """Factory of the ``llava-json`` source format."""
    return LlavaJsonReader(options or LlavaJsonOptions(), image_token_of(context), audio_token_of(context))


def build_sharegpt(options: ShareGPTOptions | None, context: Any) -> ShareGPTReader:
    """Factory of the ``sharegpt`` source format."""
    return ShareGPTReader(options or ShareGPTOptions(), image_token_of(context), audio_token_of(context))
