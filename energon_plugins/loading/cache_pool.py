"""The loaders' cache pool: Energon's ``FileStoreCachePool`` under the datamodule's ``cache_pool``.

Energon's pool prefetches media a cooker asks for with ``cache.get_lazy(source, name)`` (the
built-in conversation cooker does for media named in an aux source,
:mod:`energon_plugins.encoding.chat.aux_media`) into a local directory, in background threads,
while the sample waits in the shuffle buffer; the task encoder then reads the local copy, and
the copy is deleted once read. It is a prefetch stage, not a store that keeps files between
epochs: a *hit* is a read served from the local copy (the fetch had started), a *miss* a read
from the source itself (the fetch was still queued, or waited for room).

Each loader process holds its own pool (forked with the workers), with its own cap. So the
datamodule's ``max_size_gb`` is split evenly over every loader process it may run (training
and validation workers, or the main process when a loader has none): all of them together
never hold more than the cap. :class:`CountingCachePool` counts hits, misses and bytes in memory
shared with the forked workers, for :func:`cache_pool_stats` (what ``bench`` prints).
"""

import dataclasses
import multiprocessing
import threading
from typing import Any

from megatron.energon.cache import FileStoreCachePool

from energon_plugins.config.cache_pool import CachePoolSettings, cache_pool_settings, is_energon_cache_pool

_HITS, _READS, _CACHED, _HELD, _PEAK = range(5)

ROOM_POLL_S = 0.05
"""How often a fetch waiting for room in the cache re-checks whether its sample is being read."""


class _PollingCondition(threading.Condition):
    """A condition whose untimed ``wait`` wakes every :data:`ROOM_POLL_S` seconds.

    Energon 7.4.1's pool sets ``require_data_now`` and notifies *before* a fetch that finds no
    room starts waiting, and the fetch checks the flag only after a wake-up: the notification
    is lost, the reader waits for the fetch and the fetch for room nobody frees (seen here with
    a small cap). Waking periodically makes the fetch see the flag and let the reader read the
    source directly.
    """

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(ROOM_POLL_S if timeout is None else timeout)


class CountingCachePool(FileStoreCachePool):
    """A ``FileStoreCachePool`` that counts, over all processes forked from it, the reads
    served from its local copies (hits), all reads, the bytes cached, and the most bytes held on
    disk at once."""

    def __init__(self, *, cap_bytes: int, **kwargs: Any) -> None:
        # created before any worker is forked: the workers share these counters
        self._counters = multiprocessing.get_context("fork").Array("q", 5)
        self._task = threading.local()
        self.cap_bytes = int(cap_bytes)
        super().__init__(**kwargs)
        self._cache_space_available = _PollingCondition(self._lock)

    def _add(self, index: int, amount: int) -> None:
        with self._counters.get_lock():
            self._counters[index] += amount
            if index == _HELD:
                self._counters[_PEAK] = max(self._counters[_PEAK], self._counters[_HELD])

    def _get_data(self, ds: Any, fname: str, entry: Any) -> Any:
        self._add(_READS, 1)
        return super()._get_data(ds, fname, entry)

    def _read_from_cache(self, entry: Any) -> Any:
        self._add(_HITS, 1)
        return super()._read_from_cache(entry)

    def _cache_out_task(self, ds: Any, fname: str, entry: Any) -> bool:
        self._task.fetching = True
        try:
            return bool(super()._cache_out_task(ds, fname, entry))
        finally:
            self._task.fetching = False

    def _write_to_cache(self, path: Any, data: bytes) -> None:
        super()._write_to_cache(path, data)
        if getattr(self._task, "fetching", False):  # a prefetch (not to_cache)
            self._add(_CACHED, len(data))
            self._add(_HELD, len(data))

    def _remove_cached_file(self, entry: Any) -> None:
        if entry.cache_path is not None and entry.data_size > 0 and entry.cache_path.exists():
            self._add(_HELD, -int(entry.data_size))
        super()._remove_cached_file(entry)

    # Energon's pool stops its threads before a fork and asserts it has no fetch pending: true
    # in the main process of a loader with workers, not of one without (num_workers: 0) whose
    # samples wait in the shuffle buffer when another loader starts its workers. Then the
    # parent keeps fetching and the child, which never reads this pool, starts an empty one.
    def __before_fork__(self) -> None:
        self._busy_at_fork = bool(self._pending_tasks)
        if not self._busy_at_fork:
            super().__before_fork__()

    def __after_in_parent_fork__(self) -> None:
        if not getattr(self, "_busy_at_fork", False):
            super().__after_in_parent_fork__()

    def __after_in_child_fork__(self) -> None:
        if getattr(self, "_busy_at_fork", False):
            self._lock = threading.RLock()  # a parent's thread may have held it at the fork
            self._cache_space_available = _PollingCondition(self._lock)
            self._task = threading.local()
            self._pending_tasks.clear()  # the parent's fetches: this copy never reads them
            self.current_cache_size = self.current_cache_count = 0
            self._worker_pool = None  # its threads stayed in the parent
            self._busy_at_fork = False
        super().__after_in_child_fork__()

    def stats(self) -> "CachePoolStats":
        """The counts so far, over this process and every worker forked from it."""
        with self._counters.get_lock():
            values = [int(value) for value in self._counters[:]]
        return CachePoolStats(
            hits=values[_HITS],
            misses=values[_READS] - values[_HITS],
            cached_bytes=values[_CACHED],
            peak_bytes=values[_PEAK],
            cap_bytes=self.cap_bytes,
        )


@dataclasses.dataclass(frozen=True)
class CachePoolStats:
    """What a loader's cache pool did.

    Attributes:
        hits: media reads served from the local copy.
        misses: media reads from the source itself.
        cached_bytes: bytes written to the cache directory.
        peak_bytes: most bytes the cache held on disk at once (all processes of the loader).
        cap_bytes: the loader's share of ``max_size_gb``.
    """

    hits: int
    misses: int
    cached_bytes: int
    peak_bytes: int
    cap_bytes: int

    @property
    def reads(self) -> int:
        """Media reads through the pool."""
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        """``hits / reads`` (``None`` before the first read)."""
        return self.hits / self.reads if self.reads else None

    def as_dict(self) -> dict[str, Any]:
        """The figures, with the hit rate rounded to 4 places."""
        rate = self.hit_rate
        return {
            **dataclasses.asdict(self),
            "reads": self.reads,
            "hit_rate": None if rate is None else round(rate, 4),
        }


def loader_processes(datamodule: Any) -> int:
    """The loader processes that may hold a cache pool at once: training and validation
    workers, each loader at least one (its main process when it has no worker)."""
    return max(int(datamodule.num_workers), 1) + max(int(datamodule.num_val_workers), 1)


def build_cache_pool(settings: CachePoolSettings, processes: int, workers: int) -> CountingCachePool:
    """A pool for a loader with ``workers`` worker processes: each process may hold
    ``max_size_gb / processes`` (``processes``: all loader processes of the datamodule)."""
    share = settings.max_bytes / max(processes, 1)
    return CountingCachePool(
        cap_bytes=int(share * max(workers, 1)),
        parent_cache_dir=_directory(settings.path),
        num_workers=settings.prefetch_threads,
        max_cache_size_gbytes=share / 1024**3,
    )


def _directory(path: str) -> Any:
    from pathlib import Path

    return Path(path).expanduser().absolute()


def loader_cache_pool(datamodule: Any, split: str) -> Any:
    """The cache pool for ``split``'s loaders (``None`` without ``cache_pool``): an Energon
    ``CachePool`` object given to the datamodule as it is, else one :class:`CountingCachePool`
    per split, built on first use and kept in ``datamodule.cache_pools``."""
    value = getattr(datamodule, "cache_pool", None)
    if value is None:
        return None
    if is_energon_cache_pool(value):
        return value  # the caller's own Energon pool
    pools = datamodule.__dict__.setdefault("cache_pools", {})
    if split not in pools:
        settings = cache_pool_settings(value)
        assert settings is not None
        workers = datamodule.num_workers if split == "train" else datamodule.num_val_workers
        pools[split] = build_cache_pool(settings, loader_processes(datamodule), workers)
    return pools[split]


def cache_pool_stats(datamodule: Any, split: str = "train") -> CachePoolStats | None:
    """The counts of ``split``'s cache pool (``None``: no pool of this package's, or not built)."""
    pool = getattr(datamodule, "cache_pools", {}).get(split)
    return pool.stats() if isinstance(pool, CountingCachePool) else None
