"""Reused arrays for large outputs in the main process, and the sizing rules both pools share.

An :class:`OutputPool` hands out byte arrays as tensors (a numpy view wrapped by
``torch.from_numpy``) and takes an array back when the last tensor or view of it is gone;
:func:`best_fit` and :data:`POOL_HEADROOM` size both it and the loader workers'
shared-memory pool (:mod:`~energon_plugins.encoding.memory.shared`); :func:`prefault` faults
a new array's pages in with one system call. Nothing here imports torch at module import.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

POOL_MIN_BYTES = 1 << 20
"""Outputs smaller than this are plain ``torch.empty`` (glibc reuses small blocks itself)."""
POOL_FREE_ARRAYS = 4
"""Free arrays kept for reuse; more are given back to the system."""
POOL_HEADROOM = 1.25
"""A new pooled array is this much larger than asked, so the next batch (a little larger or
smaller) fits in it."""


def best_fit(free: list[Any], nbytes: int, size: Any) -> Any:
    """The smallest of ``free`` whose ``size(item)`` holds ``nbytes`` without being more than
    twice as large (a small batch does not tie up a large buffer), or None."""
    fits = [item for item in free if nbytes <= size(item) <= 2 * nbytes]
    return min(fits, key=size) if fits else None


class OutputPool:
    """Byte arrays handed out as tensors and taken back when the last view of one is gone."""

    def __init__(self, free_arrays: int = POOL_FREE_ARRAYS) -> None:
        self._free: list[Any] = []
        self._limit = free_arrays
        self._lock = threading.RLock()  # a finalizer may run in any thread, or inside take()

    def take(self, nbytes: int) -> Any:
        """A uint8 tensor of ``nbytes`` bytes: a free array that fits (at most twice as large),
        or a new one (``POOL_HEADROOM`` larger, its pages faulted in)."""
        import numpy as np
        import torch

        with self._lock:
            array = best_fit(self._free, nbytes, lambda a: a.nbytes)
            if array is not None:
                self._free = [a for a in self._free if a is not array]
        if array is None:
            array = np.empty(int(nbytes * POOL_HEADROOM), dtype=np.uint8)
            prefault(array.ctypes.data, array.nbytes)
        view = array[:nbytes]
        weakref.finalize(view, self._give_back, array)
        return torch.from_numpy(view)

    def _give_back(self, array: Any) -> None:
        with self._lock:
            self._free.append(array)
            if len(self._free) > self._limit:
                smallest = min(self._free, key=lambda a: a.nbytes)
                self._free = [a for a in self._free if a is not smallest]

    @property
    def free_bytes(self) -> int:
        """Bytes held for reuse (not in any live tensor)."""
        with self._lock:
            return sum(a.nbytes for a in self._free)


_POOL: OutputPool | None = None
_POOL_LOCK = threading.Lock()


def process_pool() -> OutputPool:
    """This process's :class:`OutputPool`, created on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = OutputPool()
        return _POOL


_MADV_POPULATE_WRITE = 23  # Linux 5.14+
_madvise: Any = None


def prefault(address: int, nbytes: int) -> None:
    """Fault in the whole pages of ``[address, address + nbytes)`` with one system call (best
    effort: on other systems or older kernels the pages fault in on first write)."""
    global _madvise
    if _madvise is None:
        import ctypes
        import sys

        _madvise = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                _madvise = libc.madvise
            except (OSError, AttributeError):  # pragma: no cover - no libc symbol
                _madvise = False
    if not _madvise:
        return
    import mmap

    page = mmap.PAGESIZE
    first, last = -(-address // page) * page, (address + nbytes) // page * page
    if last > first:
        _madvise(first, last - first, _MADV_POPULATE_WRITE)  # an error leaves it to page faults
