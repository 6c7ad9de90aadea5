"""Memory for image processors' outputs: shared memory in a loader worker, reused elsewhere.

A processor's pixel output is large (a Qwen2-VL batch of four 1-megapixel images: about
80 MB of float32) and written once. Where it is allocated decides much of what it costs:

- In a loader worker, in shared memory: the batch a worker hands to the main process is
  moved there anyway (a copy of every tensor not already there); allocated there from the
  start, it is not copied (as torch's own ``default_collate`` does), and from 1 MiB up it
  comes from segments reused once the main process is done with them
  (:mod:`~energon_plugins.encoding.memory.shared`).
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

from collections.abc import Sequence
from typing import Any

from energon_plugins.encoding.memory.pool import POOL_MIN_BYTES, process_pool


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
        from energon_plugins.encoding.memory import shared

        shared_pool = shared.pool() if numel * element >= POOL_MIN_BYTES else None
        if shared_pool is not None:
            return shared_pool.take(numel * element).view(dtype).view(shape)
        storage = torch.UntypedStorage._new_shared(numel * element)
        # torch's stubs lack set_(source, offset, size) with the default (contiguous) stride
        return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))  # type: ignore[call-overload]
    if numel * element < POOL_MIN_BYTES:
        return torch.empty(shape, dtype=dtype)
    return process_pool().take(numel * element).view(dtype).view(shape)


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
