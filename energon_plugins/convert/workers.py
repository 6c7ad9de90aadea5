"""The parts of a conversion that run per record, and its set-up.

The reader is handed to every worker process once (:func:`init_worker`); each worker then
loads and checks batches of records (:func:`load_batch`) under the run's media limits.
:func:`convert_settings` and :func:`build_reader` check the arguments and build the source
format's reader before anything is read.
"""

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pydantic

from energon_plugins.convert.checks import sample_parts
from energon_plugins.convert.formats.audio import DEFAULT_AUDIO_TOKEN
from energon_plugins.convert.formats.media import MediaLimits, media_limits
from energon_plugins.convert.records import RecordError
from energon_plugins.convert.settings import ConvertSettings
from energon_plugins.convert.storage import ConvertStorageError
from energon_plugins.errors import ConvertError

BATCH_RECORDS = 32
"""Records sent to a worker at a time."""

_WORKER: dict[str, Any] = {}


def init_worker(
    reader: Any,
    image_token: str,
    reencode: str | None,
    limits: MediaLimits | None = None,
    audio_token: str = DEFAULT_AUDIO_TOKEN,
) -> None:
    """Set up a worker process: the reader and what every record's check needs."""
    _WORKER.update(
        reader=reader, image_token=image_token, reencode=reencode, limits=limits, audio_token=audio_token
    )


def load_batch(batch: list[tuple[int, str, Any]]) -> list[tuple[int, str, Any, Any, Any]]:
    """``(index, location, id, problem, parts)`` per record: ``problem`` is ``(reason,
    message)`` for a rejected record, else ``parts`` are its tar parts. A failing store
    (:class:`~energon_plugins.convert.storage.ConvertStorageError`) stops the run instead."""
    reader = _WORKER["reader"]
    out: list[tuple[int, str, Any, Any, Any]] = []
    for index, location, payload in batch:
        ident = None
        try:
            with media_limits(_WORKER["limits"]):  # what the reader's image reads obey
                record = reader.load(payload)
                ident = record.id
                parts = sample_parts(
                    record,
                    location,
                    image_token=_WORKER["image_token"],
                    reencode=_WORKER["reencode"],
                    audio_token=_WORKER.get("audio_token", DEFAULT_AUDIO_TOKEN),
                )
            out.append((index, location, ident, None, parts))
        except RecordError as exc:
            out.append((index, location, exc.id or ident, (exc.reason, exc.message), None))
        except ConvertStorageError:  # the store failed, not the record: stop (resumable)
            raise
        except Exception as exc:  # noqa: BLE001 - a reader failing on one record: reported
            out.append((index, location, ident, ("reader_error", f"{type(exc).__name__}: {exc}"), None))
    return out


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size`` (the last may be shorter)."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def convert_settings(source_format: Any, **kwargs: Any) -> ConvertSettings:
    """The validated settings of a run (``None`` values: the defaults).

    Raises:
        ConvertError: every invalid setting, named.
    """
    name = (
        source_format
        if isinstance(source_format, str)
        else (f"{type(source_format).__module__}.{type(source_format).__qualname__}")
    )
    values = {k: v for k, v in kwargs.items() if v is not None}
    try:
        return ConvertSettings(source_format=name, **values)
    except pydantic.ValidationError as exc:
        from energon_plugins.host.registry import format_validation_errors

        raise ConvertError(
            "invalid convert settings:\n  " + "\n  ".join(format_validation_errors(exc))
        ) from None


def build_reader(source_format: Any, settings: ConvertSettings) -> Any:
    """The reader of a registered source format's name, or the reader object given.

    Raises:
        ConvertError: the reader has no ``scan`` or ``load``.
    """
    if isinstance(source_format, str):
        from energon_plugins.encoding.sample_config import MultiModalSampleConfig
        from energon_plugins.host.api import create
        from energon_plugins.host.context import BuildContext
        from energon_plugins.host.kinds import SOURCE_FORMAT

        context = BuildContext(
            sample_config=MultiModalSampleConfig(image_token=settings.image_token),
            extra={"audio_token": settings.audio_token},
        )
        reader = create(SOURCE_FORMAT, source_format, settings.options, context)
    else:
        reader = source_format
    missing = [m for m in ("scan", "load") if not callable(getattr(reader, m, None))]
    if missing:
        raise ConvertError(
            f"source format {settings.source_format!r} built a "
            f"{type(reader).__name__} without {' and '.join(missing)}()"
        )
    return reader
