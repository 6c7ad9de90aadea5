"""The GPU path on a real CUDA device: pinned batches, and device copies one batch ahead on a
side stream that give exactly the host batches. Skipped without CUDA (the CPU behaviour is
checked in ``test_transfer.py``)."""

import pytest
import torch

import energon_plugins
from tests._ranks import dp_collection

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _batches(dm, n):
    loader = dm.train_dataloader()
    out = [next(loader) for _ in range(n)]
    dm.close()
    return out


def _tensors(batch, prefix=""):
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            yield prefix + key, value
        elif isinstance(value, dict):
            yield from _tensors(value, prefix + key + ".")


@pytest.mark.parametrize("workers", [0, 2])
def test_pinned_batches_and_device_copies_equal_the_host_batches(
    vqa_dataset, tokenizer, clip_processor, workers
):
    def datamodule(**kwargs):
        return energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path),
            tokenizer,
            clip_processor,
            seq_length=320,
            micro_batch_size=2,
            num_workers=workers,
            shuffle_buffer_size=None,
            **kwargs,
        )

    host = _batches(datamodule(pin_memory=True), 6)
    pinned = [name for batch in host for name, t in _tensors(batch) if t.is_pinned()]
    assert pinned, "pin_memory=True on a CUDA machine pins the batches"
    on_device = _batches(datamodule(pin_memory=True, device="cuda"), 6)
    for a, b in zip(host, on_device):
        names_a, names_b = dict(_tensors(a)), dict(_tensors(b))
        assert names_a.keys() == names_b.keys()
        for name, tensor in names_b.items():
            assert tensor.device.type == "cuda", name
            # the copy ran on a side stream; the loop's stream must see the finished values
            assert torch.equal(tensor.cpu(), names_a[name].cpu()), name


def test_a_state_saved_with_a_batch_held_on_the_device_moves_to_another_layout(
    vqa_dataset, tokenizer, clip_processor
):
    """The prefetcher holds one batch ahead on the device; the state saved meanwhile, restored
    on another number of ranks, continues exactly with the batches the loop did not receive."""
    import collections

    def datamodule(rank, ranks, workers):
        return energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path),
            tokenizer,
            clip_processor,
            seq_length=320,
            micro_batch_size=2,
            num_workers=workers,
            shuffle_buffer_size=5,
            device="cuda",
            pg_collection=dp_collection(rank, ranks),
        )

    def keys(batch):
        return list(batch["__keys__"])

    seen, states = collections.Counter(), []
    for rank in range(2):
        loader = datamodule(rank, 2, 1).train_dataloader()
        seen.update(key for _ in range(3) for key in keys(next(loader)))
        states.append(loader.save_state())
        loader.close()
    loader = datamodule(0, 1, 2).train_dataloader()
    loader.restore_state(states)
    seen.update(key for _ in range(4) for key in keys(next(loader)))  # 2 more from each partition
    loader.close()
    reference = collections.Counter()
    for rank in range(2):
        loader = datamodule(rank, 2, 1).train_dataloader()
        reference.update(key for _ in range(5) for key in keys(next(loader)))
        loader.close()
    assert seen == reference
