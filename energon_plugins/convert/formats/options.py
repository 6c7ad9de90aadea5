"""Options of the built-in source formats (import-light: pydantic only)."""

from typing import Any

from pydantic import BaseModel, ByteSize, ConfigDict, Field, field_validator

from energon_plugins.convert.formats.json_stream import DEFAULT_MAX_DEPTH, DEFAULT_MAX_RECORD_BYTES
from energon_plugins.convert.settings import parse_size


class LlavaJsonOptions(BaseModel):
    """Options of the ``llava-json`` source format."""

    model_config = ConfigDict(extra="forbid")

    image_folder: str | None = Field(
        default=None,
        description="The folder the records' image (and audio) paths are relative to (LLaVA's "
        "--image_folder); default: the folder of the JSON file. Media are read only from "
        "inside it (symlinks resolved) or a root given with --allow-outside.",
    )
    max_record_bytes: ByteSize = Field(
        default=ByteSize(DEFAULT_MAX_RECORD_BYTES),
        ge=1,
        description="The largest record (an array element or a line), in bytes ('16MiB' "
        "accepted); a larger one is rejected as record_too_large without being kept in memory.",
    )
    max_depth: int = Field(
        default=DEFAULT_MAX_DEPTH,
        ge=1,
        description="The deepest nesting of lists and objects in a record (the record is "
        "level 1); a deeper one is rejected as too_deep.",
    )

    @field_validator("max_record_bytes", mode="before")
    @classmethod
    def _record_bytes(cls, value: Any) -> Any:
        return parse_size(value)


class ShareGPTOptions(LlavaJsonOptions):
    """Options of the ``sharegpt`` source format (``image_folder`` as for ``llava-json``)."""

    turns_field: str | None = Field(
        default=None,
        description="The record field holding the turns; default: 'messages', else 'conversations'.",
    )
    images_field: str | None = Field(
        default=None,
        description="The record field holding the image paths; default: 'images', else 'image' "
        "(a record without either has no images).",
    )
    audios_field: str | None = Field(
        default=None,
        description="The record field holding the audio paths (wav, flac, mp3, m4a, ogg; one "
        "path or a list, one <audio> placeholder each); default: 'audios', else 'audio' (a "
        "record without either has no audio).",
    )


class HFParquetOptions(BaseModel):
    """Options of the ``hf-parquet`` source format (a column mapping)."""

    model_config = ConfigDict(extra="forbid")

    turns_column: str | None = Field(
        default=None,
        description="The column of turns (from/value or role/content, content as text or typed "
        "parts); default: 'messages', else 'conversations'. Ignored when question_column is set.",
    )
    images_column: str | None = Field(
        default=None,
        description="The column of images: a list of {bytes, path} structs (the Hugging Face "
        "Image feature), one such struct, or raw bytes; default: 'images', else 'image'.",
    )
    audios_column: str | None = Field(
        default=None,
        description="The column of audio clips: a list of {bytes, path} structs (the Hugging "
        "Face Audio feature; the path's extension, else the bytes' container, names the part: "
        "wav, flac, mp3, m4a, ogg), one such struct, raw bytes or a path; default: 'audios', "
        "else 'audio'.",
    )
    id_column: str | None = Field(
        default=None, description="A column kept as each record's id; default: 'id' if present."
    )
    question_column: str | None = Field(
        default=None,
        description="VQA layout: the column holding the question (one user turn; an image "
        "placeholder per image, and an audio one per clip, is put before it when it has none). "
        "Needs answer_column.",
    )
    answer_column: str | None = Field(
        default=None, description="VQA layout: the column holding the answer (the assistant turn)."
    )
    image_folder: str | None = Field(
        default=None,
        description="The folder that image and audio structs holding only a path are relative "
        "to; default: the parquet folder. Such paths are read only from inside it (symlinks "
        "resolved) or a root given with --allow-outside.",
    )
    batch_rows: int = Field(default=256, ge=1, description="Rows read from a parquet file at a time.")
