"""Processor output memory: shared memory in a loader worker; elsewhere, arrays reused only
once nothing of the last batch that held them is alive."""

import gc

import torch
from torch.utils.data import DataLoader, Dataset

from energon_plugins.encoding.memory import pool as pools
from energon_plugins.encoding.memory import shared as shared_outputs
from energon_plugins.encoding.memory.outputs import concatenated, new_output
from energon_plugins.encoding.memory.pool import (
    POOL_HEADROOM,
    POOL_MIN_BYTES,
    OutputPool,
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
    assert pool.free_bytes == int(64 * POOL_MIN_BYTES * POOL_HEADROOM) + int(
        5 * POOL_MIN_BYTES * POOL_HEADROOM
    )


def test_new_output_in_the_main_process_is_writable_contiguous_and_sized():
    out = new_output((ROWS, 1176))
    assert out.shape == (ROWS, 1176) and out.dtype == torch.float32 and out.is_contiguous()
    out.copy_(torch.arange(ROWS * 1176, dtype=torch.float32).view(ROWS, 1176))
    assert float(out[-1, -1]) == ROWS * 1176 - 1
    tiny = new_output((2, 3), torch.uint8)
    assert tiny.shape == (2, 3) and tiny.dtype == torch.uint8


def test_concatenated_equals_torch_cat_and_reuses_pooled_memory(monkeypatch):
    """Along any dim, mixed dtypes promoted as torch.cat does, small (plain) and large (pooled).

    The process's pool is replaced by an empty one for the test: arrays that earlier tests left
    free in the shared pool may fit better and be handed out first (it failed so under -n 2).
    """
    monkeypatch.setattr(pools, "_POOL", OutputPool())
    big = [torch.randn(ROWS // 2, 1176), torch.randn(ROWS // 3, 1176), torch.randn(1, 1176)]
    out = concatenated(big)
    assert torch.equal(out, torch.cat(big)) and out.is_contiguous()
    address = out.data_ptr()
    del out
    gc.collect()
    assert concatenated(big).data_ptr() == address  # the pooled array, handed out again
    rows = [torch.randn(1, 3, 5), torch.randn(1, 4, 5)]
    assert torch.equal(concatenated(rows, dim=1), torch.cat(rows, dim=1))
    assert torch.equal(concatenated(rows, dim=-2), torch.cat(rows, dim=-2))
    mixed = [torch.arange(4, dtype=torch.int32).view(2, 2), torch.full((1, 2), 0.5, dtype=torch.float64)]
    result = concatenated(mixed)
    assert result.dtype == torch.float64 and torch.equal(result, torch.cat(mixed))
    on_meta = [torch.empty(2, 3, device="meta"), torch.empty(1, 3, device="meta")]
    assert concatenated(on_meta).device.type == "meta"  # another device: concatenated there


class _Concatenated(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, index):
        parts = [torch.full((ROWS // 2, 1176), float(index)), torch.full((ROWS // 2, 1176), -1.0)]
        out = concatenated(parts)
        pool = shared_outputs.pool()
        in_pool = pool is not None and pool.holds(out.data_ptr())
        return out, in_pool or out.is_shared(), torch.cat(parts).is_shared()


def test_concatenated_in_a_loader_worker_is_shared_memory():
    """A worker's concatenation is born in shared memory (torch.cat's is not: it is copied
    there on the way to the main process), and arrives intact."""
    for index, (out, shared, cat_shared) in enumerate(
        DataLoader(_Concatenated(), batch_size=None, num_workers=1)
    ):
        assert shared and not cat_shared
        assert float(out[0, 0]) == index and float(out[-1, -1]) == -1.0


class _Outputs(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, index):
        out = new_output((ROWS, 1176))
        out.fill_(float(index))
        return out, out.data_ptr()  # the worker-side address: reused segments repeat it


def test_worker_outputs_reuse_shared_memory_only_after_the_main_process_lets_go():
    """A worker's outputs arrive intact, segments are reused once the main process drops a
    batch, and a batch the main process keeps is never overwritten by later ones."""
    loader = DataLoader(_Outputs(), batch_size=None, num_workers=1, prefetch_factor=2)
    kept, addresses, means = None, [], []
    for index, (out, address) in enumerate(loader):
        means.append(float(out.mean()))
        addresses.append(address)
        if index == 0:
            kept = out[5:]  # a view of the first batch, held to the end
        del out
    assert means == [float(i) for i in range(12)]
    assert bool((kept == 0.0).all())  # never overwritten while held
    assert len(set(addresses)) < len(addresses)  # segments were reused
    assert addresses.count(addresses[0]) == 1  # ... but not the one still held


def test_worker_outputs_held_beyond_the_tracked_count_stay_intact():
    """The main process keeps every batch (more than a worker tracks): none is overwritten,
    and the worker goes on with new segments."""
    from energon_plugins.encoding.memory.shared import OUTSTANDING

    class Many(_Outputs):
        def __len__(self):
            return OUTSTANDING + 6

    held = [out for out, _ in DataLoader(Many(), batch_size=None, num_workers=1)]
    assert [float(out.mean()) for out in held] == [float(i) for i in range(OUTSTANDING + 6)]
    assert all(bool((out == float(i)).all()) for i, out in enumerate(held))


class _SentTwice(Dataset):
    """The same output in two batches (a worker that resends what it holds)."""

    def __init__(self):
        self.last = None

    def __len__(self):
        return 6

    def __getitem__(self, index):
        if index % 2:
            return self.last, index
        self.last = new_output((ROWS, 1176))
        self.last.fill_(float(index))
        return self.last, index


def test_an_output_sent_twice_is_not_released_by_its_first_receiver():
    """Each receiver of the same output gets its own memory when it is sent a second time, so
    dropping the first copy cannot let the worker overwrite the second."""
    received = []
    for out, index in DataLoader(_SentTwice(), batch_size=None, num_workers=1):
        received.append(out)
        if index % 2:
            del received[-2]  # the first receipt goes away; the second must stay intact
    assert [float(out.mean()) for out in received] == [0.0, 2.0, 4.0]
