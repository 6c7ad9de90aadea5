"""Memory for image processors' outputs: shared memory in a loader worker, reused elsewhere.

A processor's pixel output is large (a Qwen2-VL batch of four 1-megapixel images: about
80 MB of float32) and written once. Where it is allocated decides much of what it costs:

- In a loader worker, in shared memory: the batch a worker hands to the main process is
  moved there anyway (a copy of every tensor not already there); allocated there from the
  start, it is not copied (as torch's own ``default_collate`` does), and from 1 MiB up it
  comes from segments reused once the main process is done with them
  (:mod:`~energon_plugins.encoding.image_processors.shared_outputs`).
- Elsewhere (``num_workers: 0``, validation, notebooks), in arrays that are reused once the
  batch that held them is gone. A fresh array of more than 32 MiB is a fresh ``mmap`` that
  glibc gives back on free, so every batch would fault its pages in again (measured here:
  0.3-0.5 ms per MiB, about a third of the fast processors' time). A pooled array is handed
  out as a numpy view wrapped by ``torch.from_numpy``; the tensor's storage holds the view
  and the view's finalizer returns the array to the pool, so an array is reused only when no
  tensor, view or copy-free conversion of the last batch is alive anywhere.

Nothing here imports torch at module import.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
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


def new_output(shape: tuple[int, ...], dtype: Any = None) -> Any:
    """An empty tensor for a processor's output, allocated where it is cheapest to fill.

    In a loader worker: shared memory (reused segments from 1 MiB up). Elsewhere, from 1 MiB
    up: a reused array (see the module's docstring), its pages faulted in by one
    ``madvise(MADV_POPULATE_WRITE)`` call when new (a fresh multi-megabyte tensor otherwise
    takes one page fault per 4 KiB page on first write: 23 MiB filled in 67 ms instead of
    19 ms here). Below 1 MiB: ``torch.empty``.
    """
    import torch

    dtype = dtype or torch.float32
    numel = 1
    for size in shape:
        numel *= int(size)
    element = torch.empty(0, dtype=dtype).element_size()
    if torch.utils.data.get_worker_info() is not None:
        from energon_plugins.encoding.image_processors import shared_outputs

        shared = shared_outputs.pool() if numel * element >= POOL_MIN_BYTES else None
        if shared is not None:
            return shared.take(numel * element).view(dtype).view(shape)
        storage = torch.UntypedStorage._new_shared(numel * element)
        return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))
    if numel * element < POOL_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return _pool().take(numel * element).view(dtype).view(shape)


def concatenated(parts: Sequence[Any], dim: int = 0) -> Any:
    """``torch.cat(parts, dim)`` written into :func:`new_output` memory.

    What collates per-sample pixels into a batch (or a pack): a fresh tensor of tens of
    megabytes faults in its pages on the first write (a batch of eight 448 px Qwen images,
    40 MB: 8 ms instead of 2 ms here), and in a loader worker is copied once more into shared
    memory on its way to the main process. Tensors on another device (a processor run on the
    GPU) are concatenated there, as ``torch.cat`` does.
    """
    import torch

    if any(part.device.type != "cpu" for part in parts):
        return torch.cat(list(parts), dim=dim)
    dtype = parts[0].dtype
    for part in parts[1:]:
        dtype = torch.promote_types(dtype, part.dtype)
    shape = list(parts[0].shape)
    dim = dim % len(shape)
    shape[dim] = sum(int(part.shape[dim]) for part in parts)
    return torch.cat(list(parts), dim=dim, out=new_output(tuple(shape), dtype))


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


def _pool() -> OutputPool:
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
