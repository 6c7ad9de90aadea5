"""Processor outputs in a loader worker: shared memory reused across batches.

A batch leaves a loader worker through shared memory. Fresh shared-memory pages are costly
(0.8-0.9 ms per MiB measured on the 2-core benchmark machine: allocated, zeroed and mapped
page by page), and a Qwen2-VL sample carries about 19 MB of float32 pixel values, so a new
segment per batch was about half of a worker's CPU time. Here a worker keeps its segments
and hands one out again once the batch that used it is gone on both sides:

- **In the worker** a segment is a ``memfd`` mapped once; its output is a ``torch.from_numpy``
  view whose finalizer notes that the worker no longer holds it.
- **On the way** the storage of a pooled output is pickled by :func:`reduce_pooled_storage`
  (registered, in the worker only, ahead of torch's own reducer for every other storage): the
  segment's file descriptor, its size and the hand-out's generation.
- **In the main process** :func:`rebuild_pooled_storage` maps the segment and gives the
  tensor a numpy-owned storage; when the last tensor, view or pinned-copy source of it is
  gone, the array's finalizer writes the generation into the segment's tail.
- **Back in the worker** a segment is free when its view is gone and its tail holds the
  generation it was sent with (or it was never sent).

A batch a consumer keeps is never overwritten: a segment is reused only after that signal.
Segments the main process still holds are tracked up to :data:`OUTSTANDING`, then forgotten
by the worker (their memory is freed when the main process lets go). Without ``memfd``
(other systems) outputs are plain torch shared memory, as before.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import weakref
from multiprocessing import reduction
from typing import Any

import numpy as np
import torch

from energon_plugins.encoding.memory.pool import POOL_HEADROOM, best_fit

TAIL_BYTES = 64
"""Bytes after a segment's data: the generation written by the main process on release."""
ALIGN = 64
FREE_SEGMENTS = 2
"""Free segments a worker keeps for the next batches; more are closed."""
OUTSTANDING = 16
"""Segments in the main process's hands a worker keeps track of; older ones are forgotten."""


class _Segment:
    """One ``memfd`` mapped in this worker, and the state of its current hand-out."""

    def __init__(self, nbytes: int) -> None:
        self.capacity = -(-nbytes // ALIGN) * ALIGN
        self.size = self.capacity + TAIL_BYTES
        self.fd = os.memfd_create("energon-plugins-output", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.map = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        self.array = np.frombuffer(self.map, dtype=np.uint8)
        self.released = self.array[self.capacity : self.capacity + 8].view(np.int64)
        self.generation = 0
        self.held_here = False
        self.sent = False

    def is_free(self) -> bool:
        return not self.held_here and (not self.sent or int(self.released[0]) == self.generation)

    def close(self) -> None:
        self.released = self.array = None  # type: ignore[assignment]
        try:
            self.map.close()
        except BufferError:  # pragma: no cover - a view still exported: freed with it
            pass
        os.close(self.fd)


class SharedOutputPool:
    """A worker's shared-memory segments for processor outputs (see the module docstring)."""

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._by_address: dict[int, _Segment] = {}
        self._lock = threading.RLock()

    def take(self, nbytes: int) -> torch.Tensor:
        """A uint8 tensor of ``nbytes`` bytes in shared memory: a free segment that fits
        (:func:`~energon_plugins.encoding.memory.pool.best_fit`), or a new one
        ``POOL_HEADROOM`` larger."""
        with self._lock:
            free = [s for s in self._segments if s.is_free()]
            segment = best_fit(free, nbytes, lambda s: s.capacity)
            if segment is None:
                segment = _Segment(int(nbytes * POOL_HEADROOM))
                self._segments.append(segment)
                self._by_address[segment.array.ctypes.data] = segment
            segment.generation += 1
            segment.released[0] = 0
            segment.held_here, segment.sent = True, False
            self._trim()
        view = segment.array[:nbytes]
        weakref.finalize(view, self._let_go, segment)
        return torch.from_numpy(view)

    def _let_go(self, segment: _Segment) -> None:
        with self._lock:
            segment.held_here = False

    def _trim(self) -> None:
        """Close free segments beyond :data:`FREE_SEGMENTS` and forget the oldest of those in
        the main process's hands beyond :data:`OUTSTANDING`."""
        free = [s for s in self._segments if s.is_free()]
        busy = [s for s in self._segments if not s.is_free()]
        drop = sorted(free, key=lambda s: s.capacity)[: max(0, len(free) - FREE_SEGMENTS)]
        drop += [s for s in busy if not s.held_here][: max(0, len(busy) - OUTSTANDING)]
        for segment in drop:
            self._segments.remove(segment)
            del self._by_address[segment.array.ctypes.data]
            segment.close()  # the main process's own mapping keeps a forgotten one alive there

    def holds(self, address: int) -> bool:
        """Whether the data of one of this pool's segments starts at ``address``."""
        with self._lock:
            return address in self._by_address

    def sent(self, address: int) -> _Segment | None:
        """The segment whose data starts at ``address``, marked as sent; None if not pooled,
        or if this hand-out was sent already (a second receiver's release could free it while
        the first still reads: torch's reducer copies it to fresh shared memory instead)."""
        with self._lock:
            segment = self._by_address.get(address)
            if segment is None or segment.sent:
                return None
            segment.sent = True
            return segment


_POOL: SharedOutputPool | None = None
_POOL_LOCK = threading.Lock()
_TORCH_REDUCE: Any = None


def pool() -> SharedOutputPool | None:
    """This worker's pool (registering the reducer on first use), or None without ``memfd``."""
    global _POOL, _TORCH_REDUCE
    if not (hasattr(os, "memfd_create") and hasattr(mmap, "MAP_POPULATE")):
        return None
    with _POOL_LOCK:
        if _POOL is None:
            import torch.multiprocessing.reductions

            # _extra_reducers is ForkingPickler's private reducer table, absent from typeshed.
            _TORCH_REDUCE = reduction.ForkingPickler._extra_reducers[torch.UntypedStorage]  # type: ignore[attr-defined]
            reduction.ForkingPickler.register(torch.UntypedStorage, reduce_pooled_storage)
            _POOL = SharedOutputPool()
        return _POOL


def reduce_pooled_storage(storage: torch.UntypedStorage) -> Any:
    """Pickle a pooled output's storage as its segment; any other storage as torch does."""
    segment = _POOL.sent(storage.data_ptr()) if _POOL is not None else None
    if segment is None or storage.nbytes() > segment.capacity:
        return _TORCH_REDUCE(storage)
    return (
        rebuild_pooled_storage,
        (reduction.DupFd(segment.fd), segment.size, segment.capacity, segment.generation),
    )


def rebuild_pooled_storage(fd: Any, size: int, tail: int, generation: int) -> torch.UntypedStorage:
    """In the receiving process: the segment mapped, as a storage whose end writes
    ``generation`` into the segment's tail (the worker may then reuse it)."""
    handle = fd.detach()
    try:
        segment = mmap.mmap(handle, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
    finally:
        os.close(handle)
    array = np.frombuffer(segment, dtype=np.uint8)
    weakref.finalize(array, _release, segment, tail, generation)  # holds the map, not the array
    return torch.from_numpy(array).untyped_storage()


def _release(segment: mmap.mmap, tail: int, generation: int) -> None:
    struct.pack_into("<q", segment, tail, generation)
