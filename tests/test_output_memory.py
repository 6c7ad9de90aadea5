"""Processor output memory: shared memory in a loader worker; elsewhere, arrays reused only
once nothing of the last batch that held them is alive."""

import gc

import torch
from torch.utils.data import DataLoader, Dataset

from energon_plugins.encoding.image_processors.outputs import (
    POOL_HEADROOM,
    POOL_MIN_BYTES,
    OutputPool,
    new_output,
)

ROWS = 2 * POOL_MIN_BYTES // (4 * 1176)  # float32 rows of 1176: about 2 MiB, pooled


def test_an_array_is_reused_only_after_every_view_of_it_is_gone():
    pool = OutputPool()
    first = pool.take(4 * ROWS * 1176).view(torch.float32).view(ROWS, 1176)
    first.fill_(7.0)
    kept = [first[3:9], first.numpy()[:2], first.t()]  # views a consumer may hold
    address = first.data_ptr()
    del first
    gc.collect()
    assert pool.free_bytes == 0
    second = pool.take(4 * ROWS * 1176).view(torch.float32)
    second.fill_(-1.0)
    assert second.data_ptr() != address
    assert bool((kept[0] == 7.0).all()) and bool((kept[1] == 7.0).all()) and bool((kept[2] == 7.0).all())
    del kept
    assert pool.free_bytes > 0
    third = pool.take(4 * ROWS * 1176)
    assert third.data_ptr() == address  # taken back, and handed out again


def test_a_much_smaller_request_does_not_take_a_large_array_and_free_arrays_are_bounded():
    pool = OutputPool(free_arrays=2)
    big = pool.take(64 * POOL_MIN_BYTES)
    del big
    small = pool.take(POOL_MIN_BYTES)
    assert small.numel() == POOL_MIN_BYTES and pool.free_bytes >= 64 * POOL_MIN_BYTES
    held = [pool.take((k + 2) * POOL_MIN_BYTES) for k in range(4)]
    del held, small
    gc.collect()
    # the two largest free arrays are kept (the first, and the last of the four), no more
    assert pool.free_bytes == int(64 * POOL_MIN_BYTES * POOL_HEADROOM) + int(5 * POOL_MIN_BYTES * POOL_HEADROOM)


def test_new_output_in_the_main_process_is_writable_contiguous_and_sized():
    out = new_output((ROWS, 1176))
    assert out.shape == (ROWS, 1176) and out.dtype == torch.float32 and out.is_contiguous()
    out.copy_(torch.arange(ROWS * 1176, dtype=torch.float32).view(ROWS, 1176))
    assert float(out[-1, -1]) == ROWS * 1176 - 1
    tiny = new_output((2, 3), torch.uint8)
    assert tiny.shape == (2, 3) and tiny.dtype == torch.uint8


class _Outputs(Dataset):
    def __len__(self):
        return 3

    def __getitem__(self, index):
        out = new_output((ROWS, 1176))
        out.fill_(float(index))
        return out, out.is_shared()  # shared before the loader moves anything


def test_new_output_in_a_loader_worker_reaches_the_main_process_intact():
    """In a worker the output is allocated in shared memory (not copied into it on the way)."""
    loader = DataLoader(_Outputs(), batch_size=None, num_workers=1)
    received = [(float(out.mean()), shared) for out, shared in loader]
    assert received == [(0.0, True), (1.0, True), (2.0, True)]
