"""Pinning and device transfer: traversal and prefetch order, checked on the CPU."""

import collections
import dataclasses
import warnings

import pytest
import torch
from megatron.core.packed_seq_params import PackedSeqParams

from energon_plugins.encoding.samples import MultiModalBatch
from energon_plugins.loading.transfer import (
    DevicePrefetcher,
    configure_pinning,
    iter_tensors,
    map_tensors,
    pin,
    to_device,
)

Pair = collections.namedtuple("Pair", "left right")


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    derived: int = dataclasses.field(init=False, default=7)


def _nested():
    params = PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=torch.tensor([0, 3, 5], dtype=torch.int32),
        cu_seqlens_kv=torch.tensor([0, 3, 5], dtype=torch.int32),
        max_seqlen_q=3,
        max_seqlen_kv=3,
    )
    batch = MultiModalBatch(
        __key__=["a"],
        __restore_key__=(),
        input_ids=torch.ones(1, 5, dtype=torch.long),
        labels=torch.zeros(1, 5, dtype=torch.long),
        loss_mask=torch.ones(1, 5),
        position_ids=torch.arange(5)[None],
        packed_seq_params=params,
    )
    return {
        "batch": batch,
        "list": [torch.zeros(2), "text", 3],
        "pair": Pair(torch.ones(1), None),
        "frozen": Frozen(torch.ones(3)),
    }


def test_map_tensors_reaches_every_nested_tensor_and_keeps_the_rest():
    obj = _nested()
    assert len(list(iter_tensors(obj))) == 9
    moved = to_device(obj, "meta")
    assert all(t.device.type == "meta" for t in iter_tensors(moved))
    assert len(list(iter_tensors(moved))) == 9
    assert isinstance(moved["batch"], MultiModalBatch) and moved["batch"].__key__ == ["a"]
    assert moved["batch"].packed_seq_params.max_seqlen_q == 3
    assert moved["list"][1:] == ["text", 3] and isinstance(moved["pair"], Pair)
    assert moved["frozen"].derived == 7
    # The source is untouched.
    assert all(t.device.type == "cpu" for t in iter_tensors(obj))


def test_map_tensors_applies_the_function():
    doubled = map_tensors({"x": [torch.tensor([1, 2])]}, lambda t: t * 2)
    assert doubled["x"][0].tolist() == [2, 4]


def test_prefetcher_keeps_order_and_copies_one_batch_ahead():
    pulled = []

    def source():
        for i in range(5):
            pulled.append(i)
            yield {"x": torch.full((2,), i)}

    prefetcher = DevicePrefetcher(source(), "meta")
    assert prefetcher.active
    first = next(prefetcher)
    assert first["x"].device.type == "meta"
    assert pulled == [0, 1], "the next batch is fetched before the current one is returned"
    rest = list(prefetcher)
    assert len(rest) == 4 and pulled == [0, 1, 2, 3, 4]


def test_prefetcher_without_device_or_cuda_is_a_quiet_passthrough():
    data = [torch.tensor([i]) for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [t.item() for t in DevicePrefetcher(data, None)] == [0, 1, 2]
        if not torch.cuda.is_available():
            prefetcher = DevicePrefetcher(data, "cuda")
            assert not prefetcher.active
            out = list(prefetcher)
            assert [t.item() for t in out] == [0, 1, 2] and all(t.device.type == "cpu" for t in out)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_pinning_is_off_without_cuda_and_off_when_asked():
    loader = torch.utils.data.DataLoader([1, 2], pin_memory=True)
    assert configure_pinning(loader, True) is False and loader.pin_memory is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns per loader when asked to pin without CUDA
        assert list(loader) == [torch.tensor([1]), torch.tensor([2])]
    assert pin({"x": torch.ones(1)})["x"].is_pinned() is False


def test_pinning_false_really_turns_it_off():
    loader = torch.utils.data.DataLoader([1], pin_memory=True)
    assert configure_pinning(loader, False) is False and loader.pin_memory is False
