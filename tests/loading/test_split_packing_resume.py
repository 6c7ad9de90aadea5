"""Resume with ``truncation: split``: a state saved while a sample is halfway through its parts
restores exactly the batches the uninterrupted loader gives.

The state is saved when the split packing stage holds a continuation (the rest of a sample
waiting for the next buffer, a ``SplitPart`` restore key in its reading buffer); the next
batches (as Megatron-Bridge reads them) are compared field by field with a fresh datamodule
restored from that state.
"""

import pickle

import pytest

import energon_plugins
from energon_plugins.encoding.packing.split_dataset import SplitPackingDataset
from energon_plugins.encoding.packing.split_samples import PART_KEY
from energon_plugins.testing import batch_differences

SEQ = 16


def make_dm(info, tokenizer, processor, *, workers, carry=False):
    packing = energon_plugins.create(
        "packing_strategy", "first-fit-decreasing", {"carry_over": carry, "pad_to_multiple_of": 4}
    )
    return energon_plugins.EnergonMultiModalDataModule(
        str(info.path),
        tokenizer,
        processor,
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=workers,
        shuffle_buffer_size=10,
        packing_buffer_size=4,
        packing=packing,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6, "truncation": "split"}},
    )


def split_stage(dataset):
    """The split packing stage of an Energon dataset chain."""
    while not isinstance(dataset, SplitPackingDataset):
        dataset = dataset.dataset
    return dataset


def holds_continuation(stage):
    return any(key[0] == PART_KEY for key in stage._reading_buffer.restore_key())


@pytest.mark.parametrize("carry", [False, True], ids=["split", "split-carry-over"])
def test_resume_mid_sample_gives_the_same_batches(
    interleaved_dataset, tokenizer, small_clip_processor, carry
):
    dm = make_dm(interleaved_dataset, tokenizer, small_clip_processor, workers=0, carry=carry)
    loader = dm.train_dataloader()
    stage = split_stage(loader.dataloader.dataset)
    for _ in range(40):
        next(loader)
        if holds_continuation(stage):
            break
    assert holds_continuation(stage), "the state is saved while a sample waits for its next part"
    state = pickle.loads(pickle.dumps(loader.save_state()))
    assert len(pickle.dumps(state)) < 200_000, "the continuation is kept as restore keys, not tensors"
    expected = [next(loader) for _ in range(6)]
    assert any(PART_KEY not in str(k) and "[" in str(k) for b in expected for k in b["__keys__"])
    del loader, dm

    fresh = make_dm(interleaved_dataset, tokenizer, small_clip_processor, workers=0, carry=carry)
    resumed = fresh.train_dataloader()
    resumed.restore_state(state)
    for want in expected:
        assert batch_differences(next(resumed), want) == []


@pytest.mark.slow
def test_resume_with_two_workers_gives_the_same_batches(interleaved_dataset, tokenizer, small_clip_processor):
    dm = make_dm(interleaved_dataset, tokenizer, small_clip_processor, workers=2)
    loader = dm.train_dataloader()
    for _ in range(7):
        next(loader)
    state = pickle.loads(pickle.dumps(loader.save_state()))
    expected = [next(loader) for _ in range(8)]
    del loader, dm

    fresh = make_dm(interleaved_dataset, tokenizer, small_clip_processor, workers=2)
    resumed = fresh.train_dataloader()
    resumed.restore_state(state)
    for want in expected:
        assert batch_differences(next(resumed), want) == []
