"""The ``hf-parquet`` source format: a local folder of parquet files with embedded images.

The layout ``datasets`` writes (``save_to_disk`` / ``push_to_hub`` parquet shards): a column of
turns (``messages`` or ``conversations``) or a question and an answer column, and a column of
images stored as ``{bytes, path}`` structs (the ``Image`` feature), a list of them, or raw
bytes, and a column of audio clips stored the same way (the ``Audio`` feature; the path's
extension, else the bytes' container, names each ``0.wav``, ``1.flac``... part). Which column
is which is an option. Files are read in sorted order, a batch of rows at a
time (memory flat in the number of rows).
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
from energon_plugins.convert.formats.options import HFParquetOptions
from energon_plugins.convert.records import RecordError, SourceRecord
from energon_plugins.errors import ConvertError

_TURNS = ("messages", "conversations")
_IMAGES = ("images", "image")
_AUDIOS = ("audios", "audio")


def _pick(
    wanted: str | None,
    candidates: tuple[str, ...],
    names: list[str],
    what: str,
    path: pathlib.Path,
    required: bool,
) -> str | None:
    if wanted is not None:
        if wanted not in names:
            raise ConvertError(f"{path}: no column {wanted!r} ({what}); columns: {', '.join(names)}")
        return wanted
    found = next((c for c in candidates if c in names), None)
    if found is None and required:
        raise ConvertError(
            f"{path}: no {what} column (looked for {', '.join(candidates)}); columns: "
            f"{', '.join(names)}. Name it with -o {what}_column=NAME"
        )
    return found


class HFParquetReader:
    """Rows of parquet files -> conversations with their embedded images and audio clips."""

    source_suffixes = (".parquet",)
    """The files of a source folder this format reads (also those copied from a remote one)."""
    source_origin: Any = None
    """Where a local copy of a remote source came from (set by ``convert``): the default image
    folder is then the remote folder of each file."""

    def __init__(
        self, options: HFParquetOptions, image_token: str, audio_token: str = DEFAULT_AUDIO_TOKEN
    ) -> None:
        self.options = options
        self.image_token = image_token
        self.audio_token = audio_token

    def columns(self, path: pathlib.Path, names: list[str]) -> dict[str, str | None]:
        """Role -> column for one file (``turns``, ``question``, ``answer``, ``images``,
        ``audios``, ``id``)."""
        o = self.options
        if (o.question_column is None) != (o.answer_column is None):
            raise ConvertError("hf-parquet: question_column and answer_column go together")
        vqa = o.question_column is not None
        return {
            "turns": None if vqa else _pick(o.turns_column, _TURNS, names, "turns", path, True),
            "question": _pick(o.question_column, (), names, "question", path, vqa) if vqa else None,
            "answer": _pick(o.answer_column, (), names, "answer", path, vqa) if vqa else None,
            "images": _pick(o.images_column, _IMAGES, names, "images", path, False),
            "audios": _pick(o.audios_column, _AUDIOS, names, "audios", path, False),
            "id": _pick(o.id_column, ("id",), names, "id", path, False),
        }

    def source_files(self, source: pathlib.Path) -> list[pathlib.Path]:
        """The files :meth:`scan` reads (what a resumed run checks for changes)."""
        return [path for path, _ in source_files(source, (".parquet",))]

    def scan(self, source: pathlib.Path) -> Iterator[tuple[str, Any]]:
        """``(location, (row fields, media folder, column names))`` for every row, file by file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for path, label in source_files(source, (".parquet",)):
            folder = media_folder(self.options.image_folder, path, self.source_origin)
            try:
                parquet = pq.ParquetFile(path)
            except (pa.ArrowException, OSError) as exc:
                raise ConvertError(f"{path}: not a readable parquet file: {exc}") from None
            columns = self.columns(path, parquet.schema_arrow.names)
            wanted = sorted({c for c in columns.values() if c is not None})
            row = 0
            for batch in parquet.iter_batches(batch_size=self.options.batch_rows, columns=wanted):
                for values in batch.to_pylist():
                    fields = {role: values[c] for role, c in columns.items() if c is not None}
                    yield f"{label}:row {row}", (fields, folder, columns)
                    row += 1

    def load(self, payload: Any) -> SourceRecord:
        """The row's turns (or question and answer), image bytes and audio clips (embedded
        bytes, or files read inside the media folder, both under the size cap)."""
        fields, folder, columns = payload
        column = columns["images"]
        ident = None if fields.get("id") is None else str(fields["id"])
        value = fields.get("images")
        listed = isinstance(value, (list, tuple))
        try:
            images = [
                image_bytes(item, folder, f"{column}[{i}]" if listed else column)
                for i, item in enumerate(as_list(value))
            ]
            audios = audio_clips(fields.get("audios"), folder, columns.get("audios") or "audios")
            turns = self._turns(fields, len(images), len(audios))
        except RecordError as exc:
            exc.id = ident
            raise
        return SourceRecord(turns=turns, images=images, id=ident, audios=audios)

    def _turns(self, fields: dict[str, Any], num_images: int, num_audios: int) -> list[dict[str, str]]:
        if "turns" in fields:
            return normalize_turns(
                fields["turns"], field="turns", image_token=self.image_token, audio_token=self.audio_token
            )
        question, answer = fields["question"], fields["answer"]
        if not isinstance(question, str) or not isinstance(answer, str):
            raise RecordError("malformed", "the question and the answer must be text")
        tags = []
        if num_images and self.image_token not in question:
            tags += [self.image_token] * num_images
        if num_audios and self.audio_token not in question:
            tags += [self.audio_token] * num_audios
        if tags:
            question = "\n".join([*tags, question])
        return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def build_hf_parquet(options: HFParquetOptions | None, context: Any) -> HFParquetReader:
    """Factory of the ``hf-parquet`` source format."""
    return HFParquetReader(options or HFParquetOptions(), image_token_of(context), audio_token_of(context))
