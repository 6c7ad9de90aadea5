"""``convert_dataset``: a source in a known format -> a prepared Energon dataset.

The reader's ``scan`` streams ``(location, payload)`` records in this process; batches of them
go to worker processes that ``load`` each record and check it
(:func:`~energon_plugins.convert.checks.sample_parts`); results come back in input order and
are written to the split's shards (:mod:`~energon_plugins.convert.shards`) or to the report.
Every ``checkpoint_every`` records the progress is saved (:mod:`~energon_plugins.convert.state`)
so an interrupted run resumes there. When more records are rejected than ``max_rejected``
allows, the run stops before the index is written (resumable, the report there to read). At
the end Energon's prepare API indexes the shards. The output folder's rules (what
``--overwrite`` removes, a full disk) are in :mod:`~energon_plugins.convert.output`.

With ``part`` (``--part K/N``) only the part's records are loaded and written, and the end is
a part folder (no index) that :func:`~energon_plugins.convert.merge.merge_parts` joins with the
others (:mod:`~energon_plugins.convert.parts`). A source, media folder or output on object
storage (``msc://``) goes through :mod:`~energon_plugins.convert.remote_run`, which runs
:func:`convert_local` in a staging folder.
"""

import itertools
import pathlib
import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from energon_plugins.config.remote_urls import is_msc
from energon_plugins.convert.diagnose import DuplicateIds, warnings_for
from energon_plugins.convert.interrupt import raise_if_stopped
from energon_plugins.convert.output import (
    check_output,
    disk_full_error,
    remove_index,
    shard_files,
)
from energon_plugins.convert.parallel import ordered_map
from energon_plugins.convert.parts import Part, check_same_part, parse_part
from energon_plugins.convert.prepare import prepare_energon
from energon_plugins.convert.progress import ConvertProgress, RecordCounter, as_progress
from energon_plugins.convert.report import REPORT_NAME, RejectReport, parse_reject_limit
from energon_plugins.convert.result import ConvertResult
from energon_plugins.convert.settings import ConvertSettings
from energon_plugins.convert.shards import ShardStream
from energon_plugins.convert.splits import SplitAssigner
from energon_plugins.convert.state import (
    STATE_VERSION,
    check_resumable,
    check_source,
    fingerprint,
    save_state,
)
from energon_plugins.convert.workers import (
    BATCH_RECORDS,
    batched,
    build_reader,
    convert_settings,
    init_worker,
    load_batch,
)
from energon_plugins.errors import ConvertError

Progress = Callable[[int, int], None]
"""``progress(records_done, records_rejected)``, called as records are handled (the simple
form of :class:`~energon_plugins.convert.progress.ConvertProgress`)."""


# ----------------------------------------------------------------------------- the run
class _Conversion:
    """One run over the source: the open shards and report, the state and the counts."""

    def __init__(
        self,
        output: pathlib.Path,
        source: pathlib.Path,
        reader: Any,
        settings: ConvertSettings,
        state: dict[str, Any],
        watcher: ConvertProgress,
        part: Part | None = None,
    ) -> None:
        self.output, self.source, self.reader, self.settings = output, source, reader, settings
        self.state, self.watcher, self.part = state, watcher, part
        self.limit = parse_reject_limit(settings.max_rejected)
        self.duplicates = DuplicateIds()
        self.streams: dict[str, ShardStream] = {}
        self.report: RejectReport
        if "checkpoint" in state:
            self._restore(state["checkpoint"])
        else:
            output.mkdir(parents=True, exist_ok=True)
            self.streams = {
                split: ShardStream(output, split, settings.shard_size) for split, _ in settings.split_ratio
            }
            self.next_index, self.written = 0, {split: 0 for split in self.streams}
            state["checkpoint"] = {
                "next_index": 0,
                "written": dict(self.written),
                "rejected": {},
                "report_offset": 0,
                "streams": {s: {"closed": [], "open": None} for s in self.streams},
            }
            save_state(output, state)  # first: a folder with files in it always has a state
            self.report = RejectReport(output / REPORT_NAME)
        self.first = self.next_index
        self.handled = 0  # records handled by this run (the checkpoints count them)

    @property
    def records_read(self) -> int:
        """Records of this run's share (the part's, or all) before ``next_index``."""
        return self.next_index if self.part is None else self.part.records_below(self.next_index)

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        output, settings = self.output, self.settings
        self.streams = {
            split: ShardStream.restore(
                output,
                split,
                settings.shard_size,
                checkpoint["streams"].get(split, {"closed": [], "open": None}),
            )
            for split, _ in settings.split_ratio
        }
        known = set().union(*(s.known_names() for s in self.streams.values()))
        patterns = [shard_files(re.escape(split)) for split in self.streams]
        for path in output.iterdir():  # shards begun after the checkpoint, every .tar.idx
            if path.is_file() and path.name not in known and any(p.match(path.name) for p in patterns):
                path.unlink()
        remove_index(output)
        self.report = RejectReport(
            output / REPORT_NAME, offset=checkpoint["report_offset"], counts=checkpoint["rejected"]
        )
        self.next_index, self.written = checkpoint["next_index"], dict(checkpoint["written"])
        self.duplicates.replay(output / name for name in sorted(known) if (output / name).stat().st_size)

    def save_checkpoint(self) -> None:
        """Record the progress so far (the shards and the report flushed to disk first)."""
        self.state["checkpoint"] = {
            "next_index": self.next_index,
            "written": dict(self.written),
            "rejected": dict(self.report.counts),
            "report_offset": self.report.checkpoint(),
            "streams": {split: stream.checkpoint() for split, stream in self.streams.items()},
        }
        save_state(self.output, self.state)

    def abort(self) -> None:
        """Close what is still open without finishing it (the run failed or stopped)."""
        for stream in self.streams.values():
            stream.abort()
        self.report.abort()

    def _stop(self, why: str) -> ConvertError:
        """Save a checkpoint here and return the error that stops the run (resumable)."""
        report, records = self.report, self.records_read
        counts = ", ".join(f"{reason}: {n}" for reason, n in report.counts.most_common())
        hints = warnings_for(dict(report.counts), records, report.path, self.source, self.output, self.reader)
        message = (
            f"{report.total} of {records} records read ({100 * report.total / records:.0f}%) "
            f"were rejected ({counts}), more than --max-rejected {self.limit} allows{why}."
            + "".join(f"\n  {hint}" for hint in hints)
            + f"\nThe shards and the report ({report.path}) are kept, without Energon's "
            "index: fix the source or the options and start over with --overwrite, or "
            "keep what was written with --resume --max-rejected 100%"
        )
        self.state["stopped"] = message
        self.save_checkpoint()
        return ConvertError(message)

    def _handle(self, batch: list[tuple[int, str, Any, Any, Any]], assign: SplitAssigner) -> None:
        settings, report = self.settings, self.report
        for index, location, ident, problem, parts in batch:
            if problem is not None:
                report.add(index, location, problem[0], problem[1], ident)
                if settings.strict:
                    raise ConvertError(
                        f"{location}: {problem[0]}: {problem[1]} (--strict stops "
                        f"at the first bad record; see {report.path})"
                    )
            else:
                split = assign(index)
                self.streams[split].write(f"{index:010d}", parts)
                self.written[split] += 1
                self.duplicates.add(ident)
            self.next_index = index + 1
            self.handled += 1
            if (
                problem is not None
                and self.limit is not None
                and self.limit.count is not None
                and self.limit.exceeded(report.total, self.records_read)
            ):
                raise self._stop(" (a number of records stops the run when it is passed)")
            if self.handled % settings.checkpoint_every == 0:
                self.save_checkpoint()

    def stream(self, counter: RecordCounter | None) -> None:
        """Read, check and write every record after the checkpoint."""
        settings, part = self.settings, self.part
        assign = SplitAssigner(settings.split_ratio)
        records = (
            (index, location, payload)
            for index, (location, payload) in itertools.islice(
                enumerate(self.reader.scan(self.source)), self.first, None
            )
            if part is None or part.holds(index)
        )
        results = ordered_map(
            load_batch,
            batched(records, BATCH_RECORDS),
            workers=settings.workers,
            initializer=init_worker,
            initargs=(
                self.reader,
                settings.image_token,
                settings.reencode,
                settings.media_limits(),
                settings.audio_token,
            ),
        )
        self.watcher.advance(self.records_read, self.report.total)
        try:
            for batch in results:
                raise_if_stopped()
                self._handle(batch, assign)
                self.watcher.advance(self.records_read, self.report.total)
                total = counter.poll() if counter is not None else None
                if total is not None:
                    self.watcher.total(total if part is None else part.records_below(total))
        finally:
            results.close()

    def finish(self, started: float, streaming: float) -> "ConvertResult":
        """Check the rejected share, close the shards, index them (not a part's); the result."""
        report, output, records = self.report, self.output, self.records_read
        if self.limit is not None and self.limit.exceeded(report.total, records):
            raise self._stop("")
        report_bytes = report.checkpoint()
        report.close()
        closed = {split: stream.close() for split, stream in self.streams.items()}
        shards = {split: [shard["name"] for shard in files] for split, files in closed.items()}
        rate = self.handled / max(time.perf_counter() - streaming, 1e-9)
        if self.part is not None:  # merge checks the whole and indexes it
            self.state["part_files"] = {"shards": closed, "report_bytes": report_bytes}
        elif not self.written.get("train"):
            raise ConvertError(
                f"no record reached the train split ({self.next_index} read, "
                f"{report.total} rejected: see {report.path})"
            )
        else:
            kept = {split: names for split, names in shards.items() if names}
            self.watcher.phase(f"indexing {sum(map(len, kept.values()))} shards with Energon's prepare API")
            raise_if_stopped()
            prepare_energon(output, kept, self.settings.workers)
            raise_if_stopped()
        warnings = warnings_for(dict(report.counts), records, report.path, self.source, output, self.reader)
        warnings += [line for line in [self.duplicates.warning()] if line]
        result = ConvertResult(
            output=output,
            records=records,
            written=self.written,
            shards=shards,
            rejected=dict(sorted(report.counts.items())),
            report=report.path,
            seconds=round(time.perf_counter() - started, 3),
            records_per_second=round(rate, 1),
            resumed_from=self.first,
            empty_splits=tuple(split for split, names in shards.items() if not names),
            duplicate_ids=self.duplicates.count,
            duplicate_id_examples=tuple(self.duplicates.examples),
            warnings=tuple(warnings),
            part=None if self.part is None else str(self.part),
        )
        self.state.update(status="done", result=result.to_json())
        for key in ("checkpoint", "stopped"):
            self.state.pop(key, None)
        save_state(output, self.state)
        return result


def convert_dataset(
    source: Any,
    output: Any,
    source_format: Any,
    *,
    options: dict[str, Any] | None = None,
    split_ratio: Any = None,
    shard_size: Any = None,
    image_token: str | None = None,
    audio_token: str | None = None,
    reencode: str | None = None,
    max_image_size: Any = None,
    max_image_pixels: Any = None,
    allow_outside: Any = None,
    workers: int | None = None,
    strict: bool = False,
    max_rejected: Any = None,
    resume: bool = False,
    overwrite: bool = False,
    checkpoint_every: int | None = None,
    part: Any = None,
    staging: Any = None,
    progress: ConvertProgress | Progress | None = None,
) -> ConvertResult:
    """Convert ``source`` (read by the source format ``source_format``) into a prepared
    Energon dataset in ``output``.

    Args:
        source: a file or folder the source format reads, local or on object storage
            (``msc://PROFILE/...``, see :mod:`~energon_plugins.convert.remote_run`).
        output: the dataset folder (new or empty; or an earlier conversion with ``resume``
            or ``overwrite``), local or an ``msc://`` prefix.
        source_format: a registered source format's name (``llava-json``, ``sharegpt``,
            ``hf-parquet``, a plugin's), or a reader object (``scan`` and ``load``).
        options: the source format's options (validated by its options model).
        split_ratio, shard_size, image_token, audio_token, reencode, workers, strict,
            max_rejected, checkpoint_every: see :class:`~energon_plugins.convert.settings.ConvertSettings`
            (``max_rejected`` is off unless given here; the command line's default is 10%).
        max_image_size, max_image_pixels, allow_outside: the media limits (a size cap and a
            pixel cap; folders images may come from besides the media folder), see
            :class:`~energon_plugins.convert.settings.ConvertSettings`.
        resume: continue an interrupted (or stopped) conversion in ``output`` from its last
            checkpoint (same settings and source needed; a source file only touched is the same).
        overwrite: remove an earlier conversion's own files in ``output`` first (nothing else).
        part: ``"K/N"`` (or ``(K, N)``): convert only the records ``i`` with ``i % N == K - 1``
            into a part folder that :func:`~energon_plugins.convert.merge.merge_parts` joins
            with the other N - 1 (see :mod:`~energon_plugins.convert.parts`); a part resumes
            like a whole run (with the same ``part``). None: the whole source.
        staging: the local folder where a remote source is copied to and a remote output is
            converted before its upload (default: one per output in the system's temporary
            folder); unused when both are local.
        progress: a :class:`~energon_plugins.convert.progress.ConvertProgress` (notices,
            phases, the record total and progress), or ``progress(done, rejected)``.

    Raises:
        ConvertError: bad settings, an unreadable source, a ``strict`` record failure, more
            rejected records than ``max_rejected``, an output folder that cannot be used, a
            full disk (resumable).
        PluginNotFoundError, PluginOptionsError: the source format or its options.
    """
    started = time.perf_counter()
    settings = convert_settings(
        source_format,
        options=options,
        split_ratio=split_ratio,
        shard_size=shard_size,
        image_token=image_token,
        audio_token=audio_token,
        reencode=reencode,
        max_image_size=max_image_size,
        max_image_pixels=max_image_pixels,
        allow_outside=allow_outside,
        workers=workers,
        strict=strict,
        max_rejected=max_rejected,
        checkpoint_every=checkpoint_every,
    )
    chosen = parse_part(part)
    watcher = as_progress(progress) or ConvertProgress()
    media = settings.options.get("image_folder")
    if is_msc(source) or is_msc(output) or is_msc(media):
        from energon_plugins.convert.remote_run import convert_with_store

        return convert_with_store(
            source, output, source_format, settings, chosen, resume=resume, overwrite=overwrite,
            staging=staging, watcher=watcher, started=started,
        )  # fmt: skip
    source = pathlib.Path(source).expanduser().resolve()
    output = pathlib.Path(output).expanduser().resolve()
    if not source.exists():
        raise ConvertError(f"{source}: no such file or folder")
    reader = build_reader(source_format, settings)
    return convert_local(
        source,
        output,
        reader,
        settings,
        chosen,
        resume=resume,
        overwrite=overwrite,
        watcher=watcher,
        started=started,
    )


def convert_local(
    source: pathlib.Path,
    output: pathlib.Path,
    reader: Any,
    settings: ConvertSettings,
    part: Part | None,
    *,
    resume: bool,
    overwrite: bool,
    watcher: ConvertProgress,
    started: float,
    origin: Any = None,
) -> ConvertResult:
    """:func:`convert_dataset` of the local ``source`` into the local folder ``output`` (a
    staging folder when the output is remote), with the checked ``settings`` and the built
    ``reader``; ``origin`` (a :class:`~energon_plugins.convert.staging.SourceCopy`) says where a
    copied remote source came from (the state names it, and the reader's default media folder
    is the remote one).

    Raises:
        ConvertError: see :func:`convert_dataset`.
    """
    if origin is not None and hasattr(reader, "source_origin"):
        reader.source_origin = origin
    files = reader.source_files(source) if callable(getattr(reader, "source_files", None)) else None
    state = check_output(output, source, resume=resume, overwrite=overwrite, notice=watcher.notice)
    if state is not None:
        check_resumable(state, settings.output_settings())
        check_same_part(state, part, output)
        state["fingerprint"] = check_source(state, source, files)
        if state.get("status") == "done":
            return ConvertResult.from_json(state["result"])
    else:
        watcher.phase("hashing the source files (what --resume checks)")
        state = {
            "version": STATE_VERSION,
            "tool": "energon-plugins convert",
            "status": "running",
            "source": origin.url if origin is not None else str(source),
            "settings": settings.output_settings(),
            "fingerprint": fingerprint(source, files),
        }
        if part is not None:
            state["part"] = part.to_json()
    counter = RecordCounter(reader, source, files) if watcher.wants_total else None
    conversion = None
    try:
        conversion = _Conversion(output, source, reader, settings, state, watcher, part)
        streaming = time.perf_counter()
        conversion.stream(counter)
        return conversion.finish(started, streaming)
    except (OSError, sqlite3.OperationalError) as exc:
        error = disk_full_error(exc, output)
        if error is None:
            raise
        raise error from None
    finally:
        if counter is not None:
            counter.close()
        if conversion is not None:
            conversion.abort()
