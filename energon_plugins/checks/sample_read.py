"""What ``validate`` learns from a small read of the data: samples cut or skipped at ``seq_length``.

A config can be well formed and every component open, and still lose most of its answers:
``seq_length`` shorter than the data's samples cuts the answers off (``truncation: right``) or
skips the samples (nothing left to learn from, ``truncated_no_labels``; or ``truncation:
drop``). :func:`read_samples` encodes the first samples of the training split in this process,
one by one through Energon's decoding, cooking and the task encoder (no batching or packing),
bounded by a count and a time (:data:`SAMPLE_LIMIT` samples or :data:`TIME_LIMIT_S` seconds,
whichever comes first). :func:`sample_findings` turns what it saw into an error at
``seq_length`` when samples would be skipped, a warning when answers are only cut, and one
line saying what was read.
"""

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

from energon_plugins.config.settings import ConfigIssue

SAMPLE_LIMIT = 64
"""Samples the default ``validate`` reads at most."""

TIME_LIMIT_S = 5.0
"""Seconds the default ``validate`` reads samples at most (the first sample is always read)."""

SEQ_LENGTH_SKIPS = ("too_long", "truncated_no_labels")
"""Skip reasons that come from ``seq_length``: ``truncation: drop`` skipped the sample
(``too_long``), or the cut left no answer token (``truncated_no_labels``)."""


@dataclasses.dataclass
class SampleRead:
    """What :func:`read_samples` saw.

    Attributes:
        seen: samples the encoder was given (encoded or skipped).
        seconds: how long the read took.
        cut: encoded samples that were cut to ``seq_length`` (``truncated``).
        longest: the longest encoded sample, in tokens (after any cut).
        skipped: samples skipped, by reason (the encoder's ``error_counts`` and Energon's
            decoding errors).
        stopped: why the read ended (``"the end of the training split"``, ``"the 64-sample
            limit"``, ``"the 5 s limit"``, ``"64 skips in a row"``).
    """

    seen: int = 0
    seconds: float = 0.0
    cut: int = 0
    longest: int = 0
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    stopped: str = "the end of the training split"


@contextlib.contextmanager
def _at_most(encoder: Any, consecutive: int) -> Iterator[None]:
    """Let ``encoder`` give up after ``consecutive`` skips in a row (a read of the first
    samples need not wait for its usual 100), then restore its own limit."""
    before = getattr(encoder, "max_consecutive_errors", None)
    if not isinstance(before, int) or isinstance(before, bool):
        yield
        return
    encoder.max_consecutive_errors = min(before, consecutive) if before else consecutive
    try:
        yield
    finally:
        encoder.max_consecutive_errors = before


@contextlib.contextmanager
def skips_unlogged() -> Iterator[None]:
    """Hold the skip tracker's per-sample log lines (they are counted and reported)."""
    log = logging.getLogger("energon_plugins.loading.errors_policy")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def read_samples(datamodule: Any, *, limit: int = SAMPLE_LIMIT, seconds: float | None = None) -> SampleRead:
    """Encode the first training samples of ``datamodule`` one by one in this process.

    Stops after ``limit`` samples (encoded or skipped) or once ``seconds`` (``None``:
    :data:`TIME_LIMIT_S`, read at the call) have passed. Uses
    the datamodule's training encoder (its skip counts grow) and the arguments of its
    ``energon:`` section that describe the dataset.

    Raises:
        Exception: what the pipeline raises (a sample under ``on_error: raise``, a broken
            dataset, ``limit`` samples in a row skipped: Energon's ``FatalSampleError``); the
            caller reports it.
    """
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset
    from megatron.energon.errors import FatalSampleError

    seconds = TIME_LIMIT_S if seconds is None else seconds

    from energon_plugins.config.energon_arguments import split_energon_arguments
    from energon_plugins.loading.errors_policy import SkipTracker

    encoder = datamodule.task_encoder
    counts_before = dict(getattr(encoder, "error_counts", dict)())
    tracker = SkipTracker(getattr(encoder, "on_error", "skip"))
    config = WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=tracker)
    result = SampleRead()
    start = time.perf_counter()
    with _at_most(encoder, limit), skips_unlogged():
        dataset = get_val_dataset(
            datamodule.path,
            split_part="train",
            batch_size=None,
            task_encoder=encoder,
            worker_config=config,
            **split_energon_arguments(datamodule.kwargs, "val"),
        )
        loader = get_loader(dataset)
        loader.pin_memory = False
        encoded = 0
        try:
            for sample in loader:
                encoded += 1
                result.cut += bool(getattr(sample, "truncated", False))
                result.longest = max(result.longest, int(getattr(sample, "length", 0) or 0))
                if encoded + sum(_skips(encoder, counts_before, tracker).values()) >= limit:
                    result.stopped = f"the {limit}-sample limit"
                    break
                if time.perf_counter() - start >= seconds:
                    result.stopped = f"the {seconds:g} s limit"
                    break
        except FatalSampleError:
            # The encoder gave up after ``limit`` skips in a row: the counts tell why.
            if sum(_skips(encoder, counts_before, tracker).values()) < limit:
                raise
            result.stopped = f"{limit} skips in a row"
    result.skipped = _skips(encoder, counts_before, tracker)
    result.seen = encoded + sum(result.skipped.values())
    result.seconds = time.perf_counter() - start
    return result


def _skips(encoder: Any, before: dict[str, int], tracker: Any) -> dict[str, int]:
    after = dict(getattr(encoder, "error_counts", dict)())
    skipped = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    for reason, count in tracker.counts.items():
        skipped[reason] = skipped.get(reason, 0) + count
    return skipped


def _percent(count: int, total: int) -> str:
    return f"{round(100 * count / total)}%"


def _share(count: int, total: int) -> str:
    return f"{count} of {total} sample{'s' * (total != 1)} ({_percent(count, total)})"


def sample_findings(
    read: SampleRead, seq_length: int, truncation: str | None = None
) -> tuple[list[ConfigIssue], list[ConfigIssue], str]:
    """``(errors, warnings, note)`` of a read against ``seq_length``.

    Samples skipped because of ``seq_length`` (:data:`SEQ_LENGTH_SKIPS`) are an error at
    ``seq_length``; answers only cut are a warning there; samples skipped for other reasons
    (a corrupt image, a sample the encoder refuses) a warning at ``path`` (the task encoder's
    ``on_error: skip`` asked for that), an error when no sample at all was left. ``truncation`` is the encoder's option, when it has one.
    """
    errors: list[ConfigIssue] = []
    warnings: list[ConfigIssue] = []
    total = read.seen
    note = f"read {total} sample{'s' * (total != 1)} in {read.seconds:.1f} s (up to {read.stopped}"
    note += f"; longest {read.longest} tokens)" if read.longest and not read.cut else ")"
    if total == 0:
        errors.append(ConfigIssue("path", "the training split yielded no sample"))
        return errors, warnings, note
    too_long = {k: v for k, v in read.skipped.items() if k in SEQ_LENGTH_SKIPS}
    others = {k: v for k, v in read.skipped.items() if k not in SEQ_LENGTH_SKIPS}
    if too_long:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(too_long.items()))
        message = (
            f"{_share(sum(too_long.values()), total)} are longer than {seq_length} "
            f"tokens and are skipped ({reasons})"
        )
        if read.cut:
            message += f", and {read.cut} more ({_percent(read.cut, total)}) are cut"
        errors.append(ConfigIssue("seq_length", f"{message}; {_remedy(truncation)}"))
    elif read.cut:
        how = f" (truncation: {truncation})" if truncation else ""
        warnings.append(
            ConfigIssue(
                "seq_length",
                f"{_share(read.cut, total)} are longer than {seq_length} tokens; their answers are "
                f"cut{how}; raise seq_length to keep them whole",
            )
        )
    if others:
        listed = ", ".join(f"{k}: {v}" for k, v in sorted(others.items()))
        every = sum(read.skipped.values()) >= total  # nothing left to train on: an error
        (errors if every else warnings).append(
            ConfigIssue(
                "path",
                f"the task encoder skipped {_share(sum(others.values()), total)} ({listed})"
                + ("; no sample could be read" if every else "")
                + "; see `energon-plugins preview` for the samples",
            )
        )
    return errors, warnings, note


def _remedy(truncation: str | None) -> str:
    if truncation == "drop":
        return "raise seq_length, or set truncation: right to keep their beginning"
    return "raise seq_length (a cut that leaves no answer token skips the sample)"
