"""What a source reader hands the converter: :class:`SourceRecord`, or :class:`RecordError`.

Import-light (no PIL, no Energon): plugin modules import these names at registration time.
"""

import dataclasses
from typing import NamedTuple

REASONS: dict[str, str] = {
    "malformed": "the record cannot be read (invalid JSON, a missing or mistyped field)",
    "missing_image": "an image file or image bytes are missing",
    "undecodable_image": "an image's bytes do not decode",
    "missing_audio": "an audio file or audio bytes are missing",
    "undecodable_audio": "an audio clip has no audio stream, or its stream does not decode",
    "audio_format": "an audio file's extension (or embedded audio's container) is not one the "
    "encoders read: wav, flac, mp3, m4a, ogg",
    "placeholder_mismatch": "the number of image (or audio) placeholders differs from the number "
    "of images (or audio clips)",
    "roles": "the turns do not alternate user/assistant (after an optional system turn), "
    "start with the user or end with an answer",
    "empty_answer": "an assistant turn is empty",
    "reader_error": "the source format's reader raised an unexpected error on the record",
    "url": "an image is given as a URL (http://, s3://, msc://, ...); images are read by their path "
    "inside the media folder (local, or msc:// on object storage)",
    "outside_folder": "an image or audio path (symlinks resolved) lies outside the media folder and "
    "every --allow-outside root (in a remote media folder: an absolute path, or one leading out)",
    "not_a_file": "an image or audio path is a directory, a device, a FIFO or a socket, not a regular file",
    "too_large": "an image or audio file, or embedded image or audio, is larger than --max-image-size",
    "too_many_pixels": "an image's header declares more pixels than --max-image-pixels",
    "record_too_large": "a JSON record is larger than the max_record_bytes option",
    "too_deep": "a JSON record is nested deeper than the max_depth option",
}
"""Reason codes of rejected records (the report's ``reason`` field) and what each means."""

ROLES = ("system", "user", "assistant")


class RecordError(ValueError):
    """One record cannot be converted; it goes to the report with ``reason``.

    Args:
        reason: one of :data:`REASONS` (a reader may use its own code; it is counted as given).
        message: what is wrong, naming the field or file.
        id: the record's id in the source, when known (shown in the report).
    """

    def __init__(self, reason: str, message: str, id: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.id = id

    def __reduce__(self):  # pickles across the worker boundary with every field
        return (type(self), (self.reason, self.message, self.id))


class AudioClip(NamedTuple):
    """One audio clip of a record: its original encoded bytes and the extension its part is
    stored under (``wav``, ``flac``, ``mp3``, ``m4a``, ``ogg``; ``None``: found from the bytes'
    container when the record is checked, for embedded bytes without a file name)."""

    extension: str | None
    data: bytes


@dataclasses.dataclass(frozen=True)
class SourceRecord:
    """One conversation as a reader loaded it.

    Attributes:
        turns: ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``; image
            placeholders (``<image>``) in the content mark where each image goes.
        images: each image's original encoded bytes (JPEG, PNG, ...), in placeholder order.
        id: the record's own id in the source, if it has one (kept in the sample's JSON).
        audios: its audio clips in the order of their placeholders (``<audio>``), stored as
            the numbered parts ``0.wav``, ``1.flac``, ... the encoders read.
    """

    turns: list[dict[str, str]]
    images: list[bytes] = dataclasses.field(default_factory=list)
    id: str | None = None
    audios: list[AudioClip] = dataclasses.field(default_factory=list)
