"""``energon-plugins convert merge PART... OUTPUT``: the part folders of ``convert --part K/N``
-> one prepared dataset, byte for byte the one a single run writes.

The parts are checked first (:func:`~energon_plugins.convert.parts.check_parts`: each of the N
parts once, the same settings, the same source; every file a part wrote there at its size).
Then the samples of all parts are merged by their record's position (a k-way merge of
streams, one sample per part in memory) and written by the same
:class:`~energon_plugins.convert.shards.ShardStream` a single run writes with, split by split,
so the shards are cut at the same samples and hold the same bytes by construction. The
reports are merged the same way into one ``rejected.jsonl``, repeated ids are counted over the
whole source in record order, and Energon's prepare API indexes the shards as after one run.
``--max-rejected`` is checked again over the whole source (a part checks only its own
records). The output folder follows ``convert``'s rules (new or empty; an earlier conversion is
replaced only with ``overwrite``); its ``convert.json`` is a finished conversion's, so a later
``convert --overwrite`` knows what to remove. A merge that stops half-way is started over
with ``overwrite``. Part folders and the output may be on object storage (``msc://``): remote
parts are read in place, a remote output is merged in a staging folder and uploaded
(:mod:`~energon_plugins.convert.remote_run`).
"""

import heapq
import json
import pathlib
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from energon_plugins.config.remote_urls import is_msc
from energon_plugins.convert.diagnose import DuplicateIds, warnings_for
from energon_plugins.convert.interrupt import raise_if_stopped
from energon_plugins.convert.output import check_output, disk_full_error
from energon_plugins.convert.parts import PartFolder, check_parts
from energon_plugins.convert.prepare import prepare_energon
from energon_plugins.convert.progress import ConvertProgress, as_progress
from energon_plugins.convert.report import REPORT_NAME, parse_reject_limit
from energon_plugins.convert.result import ConvertResult
from energon_plugins.convert.settings import default_workers
from energon_plugins.convert.shards import ShardStream
from energon_plugins.convert.state import STATE_NAME, STATE_VERSION, save_state
from energon_plugins.errors import ConvertError

ADVANCE_EVERY = 256
"""Samples between two progress updates."""


def merge_parts(
    parts: Sequence[Any],
    output: Any,
    *,
    overwrite: bool = False,
    max_rejected: Any = None,
    workers: int | None = None,
    staging: Any = None,
    progress: Any = None,
) -> ConvertResult:
    """Join the part folders ``parts`` (``convert --part K/N``, each of the N once, in any
    order) into one prepared Energon dataset in ``output``.

    Args:
        parts: the part folders, local or ``msc://`` prefixes (read in place).
        output: the dataset folder (new or empty; or an earlier conversion with ``overwrite``),
            local or an ``msc://`` prefix (merged in ``staging``, then uploaded).
        overwrite: replace an earlier conversion's own files in ``output`` (nothing else).
        max_rejected: fail when more records of the whole source were rejected: a share
            (``"10%"``) or a number (``500``); None (the default here): no limit.
        workers: processes of Energon's indexing (default: one per CPU).
        staging: the local folder a remote output is merged in before its upload (default:
            one per output in the system's temporary folder).
        progress: a :class:`~energon_plugins.convert.progress.ConvertProgress` (notices,
            phases, samples copied of the total).

    Raises:
        ConvertError: a folder that is not a finished part, parts that do not belong together
            (another N, source or settings), a part missing or given twice, too many rejected
            records, an output folder that cannot be used, a full disk.
    """
    started = time.perf_counter()
    watcher = as_progress(progress) or ConvertProgress()
    if not parts:
        raise ConvertError("no part folder given: energon-plugins convert merge PART... OUTPUT")
    folders = sorted((PartFolder(path) for path in parts), key=lambda folder: folder.part.number)
    check_parts(folders)
    totals = _totals(folders, max_rejected)
    if is_msc(output):
        from energon_plugins.convert.remote_run import merge_to_store

        return merge_to_store(
            folders, totals, output, overwrite=overwrite, workers=workers, staging=staging,
            watcher=watcher, started=started,
        )  # fmt: skip
    output = pathlib.Path(output).expanduser().resolve()
    return merge_into(
        folders, totals, output, overwrite=overwrite, workers=workers, watcher=watcher, started=started
    )


def merge_into(
    folders: list[PartFolder],
    totals: dict[str, Any],
    output: pathlib.Path,
    *,
    overwrite: bool,
    workers: int | None,
    watcher: ConvertProgress,
    started: float,
) -> ConvertResult:
    """Merge the checked parts ``folders`` (with their ``totals``) into the local folder
    ``output`` (a staging folder when the output is remote); see :func:`merge_parts`.

    Raises:
        ConvertError: an output folder that cannot be used, a full disk.
    """
    for folder in folders:
        if isinstance(folder.path, pathlib.Path) and (output == folder.path or folder.path in output.parents):
            raise ConvertError(
                f"{output}: the output folder must not be a part folder ({folder.path}) or inside one"
            )
    first = folders[0]
    if (output / STATE_NAME).is_file() and not overwrite:
        raise ConvertError(f"{output}: holds an earlier conversion; pass --overwrite to replace it")
    check_output(
        output, local_source(first.state["source"]), resume=False, overwrite=overwrite, notice=watcher.notice
    )
    state = {
        "version": STATE_VERSION,
        "tool": "energon-plugins convert merge",
        "status": "merging",
        "source": first.state["source"],
        "settings": first.settings,
        "fingerprint": first.state["fingerprint"],
        "merged_from": [str(folder.path) for folder in folders],
    }
    output.mkdir(parents=True, exist_ok=True)
    save_state(output, state)  # first: a folder with files in it always has a state
    try:
        result = _write(folders, output, state, totals, watcher, workers, started)
    except (OSError, sqlite3.OperationalError) as exc:
        if disk_full_error(exc, output) is None:
            raise
        raise ConvertError(
            f"{output}: a write failed for lack of space ({exc}); free some space (or raise "
            "the quota or file-size limit), then run the merge again with --overwrite"
        ) from None
    state.update(status="done", result=result.to_json())
    save_state(output, state)
    return result


def _totals(folders: list[PartFolder], max_rejected: Any) -> dict[str, Any]:
    """The whole source's counts from the parts' results, after the checks a single run makes
    at its end (the rejected share, a train split)."""
    records = sum(folder.result.records for folder in folders)
    rejected: Counter[str] = Counter()
    for folder in folders:
        rejected.update(folder.result.rejected)
    splits = [pair[0] for pair in folders[0].settings["split_ratio"]]
    written = {split: sum(folder.result.written.get(split, 0) for folder in folders) for split in splits}
    try:
        limit = parse_reject_limit(max_rejected)
    except ValueError as exc:
        raise ConvertError(f"--max-rejected: {exc}") from None
    total = sum(rejected.values())
    if limit is not None and limit.exceeded(total, records):
        counts = ", ".join(f"{reason}: {n}" for reason, n in rejected.most_common())
        raise ConvertError(
            f"{total} of {records} records ({100 * total / max(records, 1):.0f}%) were rejected "
            f"over all parts ({counts}), more than --max-rejected {limit} allows; nothing was "
            "written. See the parts' reports, or merge anyway with --max-rejected 100%"
        )
    if not written.get("train"):
        raise ConvertError(f"no record reached the train split ({records} read, {total} rejected)")
    return {"records": records, "rejected": dict(sorted(rejected.items())), "written": written}


def _write(
    folders: list[PartFolder],
    output: pathlib.Path,
    state: dict[str, Any],
    totals: dict[str, Any],
    watcher: ConvertProgress,
    workers: int | None,
    started: float,
) -> ConvertResult:
    """Copy the samples and report lines in record order, index the shards; the result."""
    settings = state["settings"]
    streams = {split: ShardStream(output, split, int(settings["shard_size"])) for split in totals["written"]}
    duplicates = DuplicateIds()
    expected = sum(totals["written"].values())
    watcher.phase(f"merging {len(folders)} parts")
    watcher.total(expected)
    copying, done = time.perf_counter(), 0
    try:
        merged = heapq.merge(*(folder.samples() for folder in folders), key=lambda sample: sample[0])
        for index, split, sample in merged:
            raise_if_stopped()
            streams[split].write(f"{index:010d}", sample)
            duplicates.add(_sample_id(sample))
            done += 1
            if done % ADVANCE_EVERY == 0:
                watcher.advance(done, 0)
        watcher.advance(done, 0)
        if done != expected:
            raise ConvertError(
                f"the parts' shards hold {done} samples but their results say {expected}; "
                "convert the parts again with --overwrite"
            )
        report = output / REPORT_NAME
        with report.open("wb") as fh:
            lines = heapq.merge(*(folder.report_lines() for folder in folders), key=lambda item: item[0])
            for _, line in lines:
                fh.write(line)
        closed = {split: [shard["name"] for shard in stream.close()] for split, stream in streams.items()}
    finally:
        for stream in streams.values():
            stream.abort()
    seconds = time.perf_counter() - copying
    kept = {split: names for split, names in closed.items() if names}
    watcher.phase(f"indexing {sum(map(len, kept.values()))} shards with Energon's prepare API")
    raise_if_stopped()
    prepare_energon(output, kept, default_workers() if workers is None else workers)
    raise_if_stopped()
    source = local_source(state["source"])
    warnings = warnings_for(
        totals["rejected"], totals["records"], report, source, output, _reader_or_none(settings)
    )
    warnings += [line for line in [duplicates.warning()] if line]
    return ConvertResult(
        output=output,
        records=totals["records"],
        written=totals["written"],
        shards=closed,
        rejected=totals["rejected"],
        report=report,
        seconds=round(time.perf_counter() - started, 3),
        records_per_second=round(totals["records"] / max(seconds, 1e-9), 1),
        empty_splits=tuple(split for split, names in closed.items() if not names),
        duplicate_ids=duplicates.count,
        duplicate_id_examples=tuple(duplicates.examples),
        warnings=tuple(warnings),
        merged_parts=len(folders),
    )


def local_source(source: str) -> pathlib.Path | None:
    """A state's ``source`` as a local path (None for an ``msc://`` URL)."""
    return None if is_msc(source) else pathlib.Path(source)


def _sample_id(sample: list[tuple[str, bytes]]) -> Any:
    """The record's id in a sample's ``json`` part (what a single run counts repeats of)."""
    for extension, data in sample:
        if extension == "json":
            return json.loads(data).get("id")
    return None


def _reader_or_none(settings: dict[str, Any]) -> Any:
    """The source format's reader, for the wording of a hint (None when it cannot be built
    here: the hint then names the image folder option in general terms)."""
    from energon_plugins.convert.settings import ConvertSettings
    from energon_plugins.convert.workers import build_reader

    try:
        return build_reader(settings["source_format"], ConvertSettings.model_construct(**settings))
    except Exception:  # noqa: BLE001 - only a hint's wording depends on it
        return None
