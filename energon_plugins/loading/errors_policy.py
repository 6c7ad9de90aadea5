"""The bad-sample policy: skip (counted by reason, logged) or raise, exact across workers.

Failures reach us on three paths, and all three follow one policy (``on_error``), except a
plugin's output that breaks its contract (:class:`~energon_plugins.errors.PluginOutputError`,
see :mod:`energon_plugins.encoding.plugin_outputs`): a bug, raised at once, never skipped.

- Energon's decoding and field mapping (a corrupt image or JSON part, a missing JSON field)
  call ``WorkerConfig.global_error_handler``; :class:`SkipTracker` is that handler.
- The task encoder's own policy (:class:`~energon_plugins.PluginTaskEncoder`) counts what
  ``encode_sample`` skipped; :class:`SkipCountingDataset` folds those counts in.
- A failed read from object storage is never a bad sample: it is raised as a
  :class:`~energon_plugins.errors.RemoteStorageError` under either policy.
- A truncated shard makes Energon's tar reader raise ``ValueError("Unexpected end of tar
  file")`` outside any error handler, which ends the whole iteration.
  :func:`guard_truncated_shards` wraps the readers of every webdataset leaf so a sample that
  lies past the end of its shard is skipped (Energon's own "filtered sample" path, ``None``)
  and counted under ``truncated_shard``, or raises :class:`TruncatedShardError` naming the
  shard under ``on_error="raise"``.

Counting is exact with worker processes: each worker's cumulative counts are a savable field
of :class:`SkipCountingDataset` (so they are checkpointed and replayed with Energon's state)
and travel with every batch as a :class:`CountedBatch`; the main process keeps the latest
counts per worker and sums them (:class:`SkipCounts`). The counts therefore describe exactly
the part of the stream that was delivered, also after a restore. The counters per source
(:mod:`energon_plugins.loading.source_stats`) travel the same way, beside the skip counts.
"""

from __future__ import annotations

import collections
import copy
import logging
import tarfile
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from megatron.energon import Sample, edataclass
from megatron.energon.errors import FatalSampleError
from megatron.energon.flavors.webdataset.sample_loader import WebdatasetSampleLoaderDataset
from megatron.energon.wrappers.base import BaseWrapperDataset

from energon_plugins.encoding.chat.chatml import VIDEO_EXTENSIONS
from energon_plugins.errors import EnergonPluginsError, PluginOutputError
from energon_plugins.loading.sample_failures import sample_failure
from energon_plugins.loading.source_stats import SourceTotals
from energon_plugins.loading.stages import TransparentRestore
from energon_plugins.loading.storage_errors import storage_failure

logger = logging.getLogger(__name__)

Policy = Literal["skip", "raise"]
POLICIES = ("skip", "raise")
IMAGE_PARTS = frozenset({"png", "jpg", "jpeg", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm"})
TRUNCATED = "truncated_shard"


class BadSampleError(EnergonPluginsError, FatalSampleError):
    """A sample failed under ``on_error="raise"``; the message names the sample and shard."""


class TruncatedShardError(BadSampleError):
    """A shard ends before a sample its index lists (``on_error="raise"``)."""


def check_policy(on_error: str) -> Policy:
    """Return ``on_error`` if it is ``"skip"`` or ``"raise"``, else raise ``ValueError``."""
    if on_error not in POLICIES:
        raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    return on_error  # type: ignore[return-value]


def classify_error(exc: BaseException) -> str:
    """The reason a sample failed: ``image``, ``video``, ``json``, ``missing_field``, ... or the
    type name.

    webdataset's ``DecodingError`` carries the part name (``k``): an image extension counts as
    ``image``, a video extension as ``video`` (Energon decoding videos eagerly, with
    ``av_decode="torch"``), ``json`` as ``json``; Energon's ``FieldAccessError`` (a field_map entry that is
    absent) counts as ``missing_field``; a truncated shard as ``truncated_shard``.
    """
    name = type(exc).__name__
    if name == "DecodingError":
        part = str(getattr(exc, "k", "") or "").lower().rsplit(".", 1)[-1]
        if part in IMAGE_PARTS:
            return "image"
        if part in VIDEO_EXTENSIONS:
            return "video"
        if part == "json":
            return "json"
        return f"decode:{part}" if part else "decode"
    if name == "FieldAccessError":
        return "missing_field"
    if is_truncation(exc):
        return TRUNCATED
    return name


def error_text(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, never empty.

    webdataset's ``DecodingError`` has no message of its own (its arguments are attributes):
    it is described by the part and sample it could not decode and by the error underneath.
    """
    text = str(exc)
    if not text and type(exc).__name__ == "DecodingError":
        part, key = getattr(exc, "k", None), getattr(exc, "key", None)
        text = f"cannot decode part {part!r}" + (f" of sample {key!r}" if key else "")
        url = getattr(exc, "url", None)
        if url:
            text += f" in {url}"
        cause = exc.__cause__ or exc.__context__
        if cause is not None and cause is not exc:
            text += f" ({error_text(cause)})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def is_truncation(exc: BaseException) -> bool:
    """Whether ``exc`` is a read past the end of a tar shard."""
    if isinstance(exc, (tarfile.ReadError, EOFError)):
        return True
    return isinstance(exc, ValueError) and str(exc).startswith("Unexpected end of tar file")


def describe_sample(sample: Any) -> str:
    """``key 'K' in shard 'S'`` for Energon's raw samples, samples and batches (best effort)."""
    key = shard = None
    data = getattr(sample, "data", None)
    if isinstance(data, tuple) and data and isinstance(data[0], Mapping):
        key, shard = data[0].get("__key__"), data[0].get("__shard__")
    elif isinstance(sample, Mapping):
        key, shard = sample.get("__key__"), sample.get("__shard__")
    else:
        key = getattr(sample, "__key__", None)
    text = f"key {key!r}" if key is not None else "an unknown sample"
    return f"{text} in shard {shard!r}" if shard else text


class SkipTracker:
    """Energon error handler applying ``on_error``; counts skipped samples by reason.

    Install it as ``WorkerConfig(global_error_handler=tracker)`` *before* building the
    dataset (Energon's wrappers read the handler when they are constructed). Each process
    (the main one, every worker) holds its own copy; :class:`SkipCountingDataset` carries the
    counts out.
    """

    def __init__(self, on_error: Policy = "skip") -> None:
        self.on_error = check_policy(on_error)
        self.counts: collections.Counter[str] = collections.Counter()
        self._warned_shards: set[str] = set()
        #: The :class:`~energon_plugins.loading.source_stats.SourceCounter` of this loader
        #: (set by ``count_sources``), which also counts the skips per source; or None.
        self.sources: Any = None

    def record(self, reason: str, what: str, exc: BaseException | None = None) -> None:
        """Count one skipped sample under ``reason`` and log it."""
        self.counts[reason] += 1
        detail = f": {error_text(exc)}" if exc is not None else ""
        logger.warning("skipped %s (%s)%s", what, reason, detail)

    def __call__(self, exc: Exception, sample: Any, sources: Any = None) -> None:
        """Energon's ``global_error_handler(exception, sample, sources)``.

        A :class:`~energon_plugins.errors.PluginOutputError` (a plugin's output broke its
        contract) is a bug of the plugin, not a bad sample: it is raised under either policy,
        never counted as a skip.
        """
        if isinstance(exc, PluginOutputError):
            raise exc
        remote = storage_failure(exc)
        if remote is not None:  # the store, not the sample: never skipped
            raise remote from exc
        reason = classify_error(exc)
        what = describe_sample(sample)
        if self.on_error == "raise":
            raise BadSampleError(
                f"sample failed ({reason}) at {what}: {error_text(exc)} "
                "(on_error='raise'; use on_error='skip' to skip and count bad samples)"
            ) from exc
        self.record(reason, what, exc)
        if self.sources is not None:
            self.sources.count_skip(reason, sources)

    def truncated(self, shard: str, index: int, exc: BaseException, dataset_path: Any = None) -> None:
        """Apply the policy to sample ``index`` lying past the end of ``shard``."""
        if self.on_error == "raise":
            raise TruncatedShardError(
                f"shard {shard!r} is truncated: sample #{index} of the dataset index lies past "
                f"its end ({exc}). Re-create or re-prepare the shard, or use on_error='skip' to "
                "skip the rest of a truncated shard"
            ) from exc
        self.counts[TRUNCATED] += 1
        if self.sources is not None:
            self.sources.count_shard_skip(TRUNCATED, dataset_path)
        if shard not in self._warned_shards:
            self._warned_shards.add(shard)
            logger.warning(
                "shard %r is truncated; skipping the samples past its end (counted as %r)",
                shard,
                TRUNCATED,
            )


class _GuardedReader:
    """A tar reader proxy: a sample past the end of a truncated shard becomes ``None``."""

    def __init__(self, reader: Any, tracker: SkipTracker) -> None:
        self._reader = reader
        self._tracker = tracker

    def __getitem__(self, index: Any) -> Any:
        try:
            return self._reader[index]
        except Exception as exc:
            if not is_truncation(exc):
                raise
            self._tracker.truncated(
                _shard_of(self._reader, index, exc), index, exc, getattr(self._reader, "base_path", None)
            )
            return None

    def __len__(self) -> int:
        return len(self._reader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


def _shard_of(reader: Any, index: Any, exc: BaseException) -> str:
    """The path of the shard holding ``index`` (from the reader's index), else from ``exc``."""
    try:
        pointer = reader._get_itar_sample_pointer(index)
        name = reader.tar_filenames[pointer.tar_file_id]
        base = getattr(reader, "base_path", None)
        return str(base / name) if base is not None else str(name)
    except Exception:  # noqa: BLE001
        text = str(exc)
        return text.split(":", 1)[1].strip() if ":" in text else text


def iter_leaves(dataset: Any) -> Iterator[WebdatasetSampleLoaderDataset]:
    """Yield every webdataset leaf under an Energon dataset (through blends and wrappers)."""
    stack, seen = [dataset], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, WebdatasetSampleLoaderDataset):
            yield node
            continue
        children = getattr(node, "datasets", None)
        if children is None:  # not a wrapper: a leaf of another kind, or a plain holder
            try:
                children = [getattr(node, "dataset", None)]
            except AssertionError:  # pragma: no cover - Energon's single-dataset property
                children = []
        stack.extend(child for child in children if child is not None)


def guard_truncated_shards(dataset: Any, tracker: SkipTracker) -> int:
    """Wrap the tar readers of every webdataset leaf of ``dataset``; return how many leaves.

    Uses Energon's own skip path: a reader returning ``None`` is a filtered sample, so the
    loader moves on to the next index (the rest of a truncated shard is skipped, one counted
    sample per lost index) instead of ending the iteration.
    """
    count = 0
    for leaf in iter_leaves(dataset):
        leaf.join_readers = [
            r if isinstance(r, _GuardedReader) else _GuardedReader(r, tracker) for r in leaf.join_readers
        ]
        count += 1
    return count


@edataclass
class CountedBatch(Sample):
    """A batch with the producing worker's cumulative skip counts (unwrapped by the loader).

    From a partitioned loader (:mod:`energon_plugins.loading.partitions`) ``worker`` and
    ``partition`` are the data partition and ``index`` the partition's own output index;
    otherwise both are -1. ``source_stats``: the worker's cumulative counters per source
    (:mod:`energon_plugins.loading.source_stats`), or None.
    """

    batch: Any
    worker: int
    skip_counts: dict
    partition: int = -1
    index: int = -1
    source_stats: dict | None = None

    def pin_memory(self) -> CountedBatch:
        """A copy whose batch is pinned by torch's own pin-memory pass.

        Torch's pass (unlike Energon's generic one) keeps mapping subclasses and calls a nested
        object's own ``pin_memory()``, so a batch format's output is pinned as it is.
        """
        from torch.utils.data._utils.pin_memory import pin_memory

        return CountedBatch(
            __key__=self.__key__,
            __restore_key__=self.__restore_key__,
            batch=pin_memory(self.batch),
            worker=self.worker,
            skip_counts=self.skip_counts,
            partition=self.partition,
            index=self.index,
            source_stats=self.source_stats,
        )


class SkipCountingDataset(TransparentRestore, BaseWrapperDataset):
    """Outermost wrapper: yields each batch as a :class:`CountedBatch` with this worker's counts.

    A sample that stops the loader (Energon's ``FatalSampleError``, a batch format's error)
    leaves it as one :class:`~energon_plugins.errors.SampleFailedError` naming the sample, the
    stage and the reason (:func:`~energon_plugins.loading.sample_failures.sample_failure`).

    The cumulative counts are a savable field, so Energon checkpoints them with the rest of
    the pipeline and a restored loader reports exactly what an uninterrupted one would.
    Counts of the task encoder (``error_counts()``) are folded in as they grow. The tracker's
    counters per source (when it has them) are a savable field too; a state saved before they
    existed restores them as zero.
    """

    _savable_fields = ("_counts", "_source_stats")

    def __init__(self, dataset: Any, tracker: SkipTracker, encoder: Any = None) -> None:
        super().__init__(dataset, worker_config=dataset.worker_config)
        self.tracker = tracker
        self.encoder = encoder
        self._encoder_seen: dict[str, int] = {}
        self.reset_state_own()

    @property
    def _counts(self) -> dict[str, int]:
        return dict(self.tracker.counts)

    @_counts.setter
    def _counts(self, value: Mapping[str, int]) -> None:
        self.tracker.counts = collections.Counter(dict(value or {}))
        self._encoder_seen = self._encoder_counts()

    @property
    def _source_stats(self) -> dict[str, Any] | None:
        sources = getattr(self.tracker, "sources", None)
        return sources.state() if sources is not None else None

    @_source_stats.setter
    def _source_stats(self, value: Mapping[str, Any] | None) -> None:
        sources = getattr(self.tracker, "sources", None)
        if sources is not None:
            sources.load(value)

    def reset_state_own(self) -> None:
        """Start counting from zero."""
        self._counts = {}
        self._source_stats = None

    def restore_state(self, state: Any) -> None:
        """Restore ``state``; one saved before the counters per source existed restores them
        as zero."""
        if (
            state is not None
            and state.get("__class__") == type(self).__name__
            and "_source_stats" not in state
        ):
            state = copy.copy(state)
            state["_source_stats"] = None
        super().restore_state(state)

    def _encoder_counts(self) -> dict[str, int]:
        counts = getattr(self.encoder, "error_counts", None)
        return dict(counts()) if callable(counts) else {}

    def _fold_encoder_counts(self) -> None:
        now = self._encoder_counts()
        for reason, value in now.items():
            delta = value - self._encoder_seen.get(reason, 0)
            if delta > 0:
                self.tracker.counts[reason] += delta
        self._encoder_seen = now

    def len_worker(self, worker_idx: int | None = None) -> int:
        """The inner dataset's length."""
        return self.dataset.len_worker(worker_idx)

    def _wrap(self, batch: Any) -> CountedBatch:
        return CountedBatch(
            __key__=getattr(batch, "__key__", None),
            __restore_key__=getattr(batch, "__restore_key__", ()),
            batch=batch,
            worker=self.worker_config.rank_worker_id(),
            skip_counts=dict(self.tracker.counts),
            source_stats=self._source_stats,
        )

    def __iter__(self) -> Iterator[CountedBatch]:
        reported: dict[str, int] | None = None
        reported_sources: dict[str, Any] | None = None
        try:
            for batch in self.dataset:
                self._fold_encoder_counts()
                item = self._wrap(batch)
                reported, reported_sources = item.skip_counts, item.source_stats
                yield item
        except Exception as exc:
            # A sample that stops the loader: one message naming the sample, the stage and
            # the reason, here where the real exception (and its traceback) still exists.
            # A failed object-storage read is not a sample's fault: it names the object.
            failure = storage_failure(exc) or sample_failure(exc)
            if failure is None:
                raise
            raise failure from exc
        # A finite pass may end with skipped samples after its last batch: report them in a
        # counts-only item (``batch=None``), which the loader consumes without yielding.
        self._fold_encoder_counts()
        sources = self._source_stats
        if (self.tracker.counts and dict(self.tracker.counts) != reported) or (
            sources and sources != reported_sources
        ):
            yield self._wrap(None)

    def restore_sample(self, restore_key: Any) -> CountedBatch:
        """Restore the inner batch; it carries the counts as of now."""
        return self._wrap(self.dataset.restore_sample(restore_key))

    def config(self) -> dict[str, Any]:
        """Transparent: the inner dataset's config."""
        return self.dataset.config()

    def __str__(self) -> str:
        return f"SkipCountingDataset(on_error={self.tracker.on_error}, dataset={self.dataset})"


class SkipCounts:
    """Main-process side: the latest cumulative counts per worker, summed on demand."""

    def __init__(self) -> None:
        self.per_worker: dict[int, dict[str, int]] = {}
        #: The counters per source, kept the same way.
        self.sources = SourceTotals()

    def unwrap(self, item: Any) -> Any:
        """Record a :class:`CountedBatch`'s counts and return its batch (others unchanged).

        A counts-only item (end of a finite pass) returns ``None``: callers skip it.
        """
        if not isinstance(item, CountedBatch):
            return item
        self.per_worker[int(item.worker)] = dict(item.skip_counts)
        self.sources.record(int(item.worker), item.source_stats)
        batch = item.batch
        key = item.__restore_key__
        if key and hasattr(batch, "__restore_key__"):
            try:
                batch.__restore_key__ = key
            except (AttributeError, TypeError):  # pragma: no cover - frozen batch types
                pass
        return batch

    def filter(self, iterable: Any) -> Iterator[Any]:
        """Iterate ``iterable``, recording counts and yielding only real batches."""
        for item in iterable:
            batch = self.unwrap(item)
            if batch is not None:
                yield batch

    def total(self) -> dict[str, int]:
        """Skipped samples by reason, over all workers of this rank."""
        total: collections.Counter[str] = collections.Counter()
        for counts in self.per_worker.values():
            total.update(counts)
        return {k: v for k, v in sorted(total.items()) if v}

    def state(self) -> dict[int, dict[str, int]]:
        """A copy of the per-worker counts (saved with the loader state)."""
        return {w: dict(c) for w, c in self.per_worker.items()}

    def load(self, state: Mapping[int, Mapping[str, int]] | None) -> None:
        """Restore :meth:`state`."""
        self.per_worker = {int(w): dict(c) for w, c in (state or {}).items()}
