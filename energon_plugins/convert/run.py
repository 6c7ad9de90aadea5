"""``convert_dataset``: a source in a known format -> a prepared Energon dataset.

The reader's ``scan`` streams ``(location, payload)`` records in this process; batches of them
go to worker processes that ``load`` each record and check it
(:func:`~energon_plugins.convert.checks.sample_parts`); results come back in input order and
are written to the split's shards (:mod:`~energon_plugins.convert.shards`) or to the report.
Every ``checkpoint_every`` records the progress is saved (:mod:`~energon_plugins.convert.state`)
so an interrupted run resumes there. At the end Energon's prepare API indexes the shards.
"""

import dataclasses
import itertools
import pathlib
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pydantic

from energon_plugins.convert.checks import sample_parts
from energon_plugins.convert.parallel import ordered_map
from energon_plugins.convert.prepare import prepare_energon
from energon_plugins.convert.records import RecordError
from energon_plugins.convert.report import REPORT_NAME, RejectReport
from energon_plugins.convert.settings import ConvertSettings
from energon_plugins.convert.shards import ShardStream, shard_pattern
from energon_plugins.convert.splits import SplitAssigner
from energon_plugins.convert.state import (
    STATE_NAME,
    STATE_VERSION,
    check_resumable,
    fingerprint,
    load_state,
    save_state,
)
from energon_plugins.errors import ConvertError

BATCH_RECORDS = 32
"""Records sent to a worker at a time."""

Progress = Callable[[int, int], None]
"""``progress(records_done, records_rejected)``, called as records are handled."""


@dataclasses.dataclass(frozen=True)
class ConvertResult:
    """What a conversion wrote.

    Attributes:
        output: the dataset folder (give it as ``path`` in a datamodule config).
        records: records read from the source.
        written: split -> records written.
        shards: split -> shard file names.
        rejected: reason -> records in the report.
        report: the report file (``rejected.jsonl``).
        seconds: wall time of this run.
        records_per_second: records handled per second while streaming (before indexing).
        resumed_from: the first record this run handled (0 unless resumed).
        empty_splits: splits with a share but no record (left out of the dataset).
    """

    output: pathlib.Path
    records: int
    written: dict[str, int]
    shards: dict[str, list[str]]
    rejected: dict[str, int]
    report: pathlib.Path
    seconds: float
    records_per_second: float = 0.0
    resumed_from: int = 0
    empty_splits: tuple[str, ...] = ()

    @property
    def rejected_total(self) -> int:
        """Records in the report."""
        return sum(self.rejected.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        data = dataclasses.asdict(self)
        data.update(output=str(self.output), report=str(self.report),
                    empty_splits=list(self.empty_splits))
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConvertResult":
        """Inverse of :meth:`to_json`."""
        return cls(**{**data, "output": pathlib.Path(data["output"]),
                      "report": pathlib.Path(data["report"]),
                      "empty_splits": tuple(data.get("empty_splits", ()))})


# ----------------------------------------------------------------------------- workers
_WORKER: dict[str, Any] = {}


def _init_worker(reader: Any, image_token: str, reencode: str | None) -> None:
    _WORKER.update(reader=reader, image_token=image_token, reencode=reencode)


def _load_batch(batch: list[tuple[int, str, Any]]) -> list[tuple[int, str, Any, Any]]:
    """``(index, location, problem, parts)`` per record: ``problem`` is ``(reason, message, id)``
    for a rejected record, else ``parts`` are its tar parts."""
    reader = _WORKER["reader"]
    out = []
    for index, location, payload in batch:
        ident = None
        try:
            record = reader.load(payload)
            ident = record.id
            parts = sample_parts(record, location, image_token=_WORKER["image_token"],
                                 reencode=_WORKER["reencode"])
            out.append((index, location, None, parts))
        except RecordError as exc:
            out.append((index, location, (exc.reason, exc.message, exc.id or ident), None))
        except Exception as exc:  # noqa: BLE001 - a reader failing on one record: reported
            out.append((index, location, ("reader_error", f"{type(exc).__name__}: {exc}", ident), None))
    return out


def _batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


# ----------------------------------------------------------------------------- setup
def _settings(source_format: Any, **kwargs: Any) -> ConvertSettings:
    name = source_format if isinstance(source_format, str) else (
        f"{type(source_format).__module__}.{type(source_format).__qualname__}"
    )
    values = {k: v for k, v in kwargs.items() if v is not None}
    try:
        return ConvertSettings(source_format=name, **values)
    except pydantic.ValidationError as exc:
        from energon_plugins.host.registry import format_validation_errors

        raise ConvertError("invalid convert settings:\n  " + "\n  ".join(
            format_validation_errors(exc))) from None


def _reader(source_format: Any, settings: ConvertSettings) -> Any:
    if isinstance(source_format, str):
        from energon_plugins.encoding.sample_config import MultiModalSampleConfig
        from energon_plugins.host.api import create
        from energon_plugins.host.context import BuildContext
        from energon_plugins.host.kinds import SOURCE_FORMAT

        context = BuildContext(sample_config=MultiModalSampleConfig(image_token=settings.image_token))
        reader = create(SOURCE_FORMAT, source_format, settings.options, context)
    else:
        reader = source_format
    missing = [m for m in ("scan", "load") if not callable(getattr(reader, m, None))]
    if missing:
        raise ConvertError(f"source format {settings.source_format!r} built a "
                           f"{type(reader).__name__} without {' and '.join(missing)}()")
    return reader


def _prepare_output(output: pathlib.Path, source: pathlib.Path, *, resume: bool,
                    overwrite: bool) -> dict[str, Any] | None:
    """The state to resume from (None: start fresh), after checking the output folder."""
    if output == source or source in output.parents:
        raise ConvertError(f"{output}: the output folder must not be the source or inside it")
    if not output.exists():
        return None
    if not output.is_dir():
        raise ConvertError(f"{output}: exists and is not a folder")
    state = load_state(output)
    if not any(output.iterdir()):
        return None
    if state is None:
        raise ConvertError(f"{output}: the folder is not empty and holds no {STATE_NAME}; "
                           "choose a new or empty folder")
    if resume:
        return state
    if not overwrite:
        raise ConvertError(
            f"{output}: holds an earlier conversion ({state.get('status')}); pass --resume to "
            "continue it or --overwrite to start over"
        )
    shutil.rmtree(output)
    return None


def _restore(output: pathlib.Path, state: dict[str, Any], settings: ConvertSettings
             ) -> tuple[dict[str, ShardStream], RejectReport, dict[str, Any]]:
    checkpoint = state["checkpoint"]
    streams = {
        split: ShardStream.restore(output, split, settings.shard_size,
                                   checkpoint["streams"].get(split, {"closed": [], "open": None}))
        for split, _ in settings.split_ratio
    }
    known = set().union(*(s.known_names() for s in streams.values()))
    patterns = [shard_pattern(split) for split in streams]
    for path in output.iterdir():  # shards begun after the checkpoint
        if path.is_file() and path.name not in known and any(p.match(path.name) for p in patterns):
            path.unlink()
    shutil.rmtree(output / ".nv-meta", ignore_errors=True)
    report = RejectReport(output / REPORT_NAME, offset=checkpoint["report_offset"],
                          counts=checkpoint["rejected"])
    return streams, report, checkpoint


# ----------------------------------------------------------------------------- the run
def convert_dataset(
    source: Any,
    output: Any,
    source_format: Any,
    *,
    options: dict[str, Any] | None = None,
    split_ratio: Any = None,
    shard_size: Any = None,
    image_token: str | None = None,
    reencode: str | None = None,
    workers: int | None = None,
    strict: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    checkpoint_every: int | None = None,
    progress: Progress | None = None,
) -> ConvertResult:
    """Convert ``source`` (read by the source format ``source_format``) into a prepared
    Energon dataset in ``output``.

    Args:
        source: a file or folder the source format reads.
        output: the dataset folder (new or empty; or an earlier conversion with ``resume``
            or ``overwrite``).
        source_format: a registered source format's name (``llava-json``, ``sharegpt``,
            ``hf-parquet``, a plugin's), or a reader object (``scan`` and ``load``).
        options: the source format's options (validated by its options model).
        split_ratio, shard_size, image_token, reencode, workers, strict, checkpoint_every:
            see :class:`~energon_plugins.convert.settings.ConvertSettings`.
        resume: continue an interrupted conversion in ``output`` from its last checkpoint
            (same settings and source needed).
        overwrite: delete an earlier conversion in ``output`` first.
        progress: called with ``(records done, records rejected)`` as records are handled.

    Raises:
        ConvertError: bad settings, an unreadable source, a ``strict`` record failure, an
            output folder that cannot be used.
        PluginNotFoundError, PluginOptionsError: the source format or its options.
    """
    started = time.perf_counter()
    settings = _settings(source_format, options=options, split_ratio=split_ratio,
                         shard_size=shard_size, image_token=image_token, reencode=reencode,
                         workers=workers, strict=strict, checkpoint_every=checkpoint_every)
    source = pathlib.Path(source).expanduser().resolve()
    output = pathlib.Path(output).expanduser().resolve()
    if not source.exists():
        raise ConvertError(f"{source}: no such file or folder")
    reader = _reader(source_format, settings)
    files = reader.source_files(source) if callable(getattr(reader, "source_files", None)) else None
    prints = fingerprint(source, files)
    state = _prepare_output(output, source, resume=resume, overwrite=overwrite)
    if state is not None:
        check_resumable(state, settings.output_settings(), prints)
        if state.get("status") == "done":
            return ConvertResult.from_json(state["result"])
        streams, report, checkpoint = _restore(output, state, settings)
    else:
        output.mkdir(parents=True, exist_ok=True)
        streams = {split: ShardStream(output, split, settings.shard_size)
                   for split, _ in settings.split_ratio}
        report = RejectReport(output / REPORT_NAME)
        checkpoint = {"next_index": 0, "written": {split: 0 for split in streams}}
        state = {"version": STATE_VERSION, "tool": "energon-plugins convert", "status": "running",
                 "source": str(source), "settings": settings.output_settings(),
                 "fingerprint": prints}
    first = next_index = checkpoint["next_index"]
    written = dict(checkpoint["written"])

    def save_checkpoint() -> None:
        state["checkpoint"] = {
            "next_index": next_index, "written": dict(written), "rejected": dict(report.counts),
            "report_offset": report.checkpoint(),
            "streams": {split: stream.checkpoint() for split, stream in streams.items()},
        }
        save_state(output, state)

    save_checkpoint()
    assign = SplitAssigner(settings.split_ratio)
    streaming = time.perf_counter()
    records = ((index, location, payload) for index, (location, payload)
               in itertools.islice(enumerate(reader.scan(source)), first, None))
    results = ordered_map(
        _load_batch, _batched(records, BATCH_RECORDS), workers=settings.workers,
        initializer=_init_worker, initargs=(reader, settings.image_token, settings.reencode),
    )
    try:
        for batch in results:
            for index, location, problem, parts in batch:
                if problem is not None:
                    reason, message, ident = problem
                    report.add(index, location, reason, message, ident)
                    if settings.strict:
                        raise ConvertError(f"{location}: {reason}: {message} (--strict stops at "
                                           f"the first bad record; see {report.path})")
                else:
                    split = assign(index)
                    streams[split].write(f"{index:010d}", parts)
                    written[split] += 1
                next_index = index + 1
                if (next_index - first) % settings.checkpoint_every == 0:
                    save_checkpoint()
            if progress is not None:
                progress(next_index, sum(report.counts.values()))
    finally:
        results.close()
        report.close()
    shards = {split: [shard["name"] for shard in stream.close()] for split, stream in streams.items()}
    rate = (next_index - first) / max(time.perf_counter() - streaming, 1e-9)
    if not written.get("train"):
        raise ConvertError(
            f"no record reached the train split ({next_index} read, "
            f"{sum(report.counts.values())} rejected: see {report.path})"
        )
    prepare_energon(output, {split: names for split, names in shards.items() if names},
                    settings.workers)
    result = ConvertResult(
        output=output, records=next_index, written=written, shards=shards,
        rejected=dict(sorted(report.counts.items())), report=report.path,
        seconds=round(time.perf_counter() - started, 3), records_per_second=round(rate, 1),
        resumed_from=first,
        empty_splits=tuple(split for split, names in shards.items() if not names),
    )
    state.update(status="done", result=result.to_json())
    state.pop("checkpoint", None)
    save_state(output, state)
    return result
