"""Resume with packing on: a restored loader continues with exactly the same packed batches.

The built-in ``multimodal`` encoder packs with the selected strategy; the loader state is
saved after some batches, restored into a fresh datamodule, and the next batches (as
Megatron-Bridge reads them) compared field by field (keys, tokens, labels, masks, position ids,
images, ``cu_seqlens``). With
carry-over, the state is saved while samples are being carried, so the carried samples must
come back from the state.
"""

import pickle

import pytest

import energon_plugins
from energon_plugins.encoding.packing.carry_dataset import CarryOverPackingDataset
from energon_plugins.testing import batch_differences

SEQ = 128


def make_dm(info, tokenizer, processor, *, carry, workers, pad=1):
    packing = energon_plugins.create(
        "packing_strategy",
        "first-fit-decreasing",
        {"carry_over": carry, "pad_to_multiple_of": pad},
    )
    return energon_plugins.EnergonMultiModalDataModule(
        str(info.path),
        tokenizer,
        processor,
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=workers,
        shuffle_buffer_size=10,
        packing_buffer_size=6,
        packing=packing,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6}},
    )


def find_stage(dataset, cls):
    """The first wrapper of type ``cls`` in an Energon dataset chain."""
    while dataset is not None:
        if isinstance(dataset, cls):
            return dataset
        dataset = getattr(dataset, "dataset", None)
    return None


def same_batches(got, want):
    """Every key Megatron-Bridge's vlm_step reads (the default format) is identical: keys,
    tokens, labels, masks, position ids, visual inputs and the flat ``cu_seqlens_*`` keys."""
    assert "cu_seqlens_q_padded" in want
    assert batch_differences(got, want) == []


@pytest.mark.parametrize("carry", [False, True], ids=["per-buffer", "carry-over"])
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_resume_with_packing_gives_the_same_batches(vqa_dataset, tokenizer, clip_processor, carry, workers):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, carry=carry, workers=workers, pad=4)
    loader = dm.train_dataloader()
    stage = find_stage(loader.dataloader.dataset, CarryOverPackingDataset)
    assert (stage is not None) == carry
    for _ in range(5):
        batch = next(loader)
        assert len(batch["cu_seqlens_q"]) > 3, "rows are packed"
    if workers == 0 and carry:
        # the state is taken while samples are carried (they must come back from it)
        assert stage._reading_buffer.len_worker() > 0
        assert dm.task_encoder.packing_counts()["carried"] > 0
    state = pickle.loads(pickle.dumps(loader.save_state()))
    expected = [next(loader) for _ in range(6)]
    del loader, dm

    fresh = make_dm(vqa_dataset, tokenizer, clip_processor, carry=carry, workers=workers, pad=4)
    resumed = fresh.train_dataloader()
    resumed.restore_state(state)
    for want in expected:
        same_batches(next(resumed), want)


def test_carry_over_state_holds_carried_samples_as_restore_keys(vqa_dataset, tokenizer, clip_processor):
    """The saved state names the carried samples (restore keys), not their tensors."""
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, carry=True, workers=0)
    loader = dm.train_dataloader()
    for _ in range(3):
        next(loader)
    stage = find_stage(loader.dataloader.dataset, CarryOverPackingDataset)
    carried = list(stage._reading_buffer.restore_key())
    assert carried and len(stage._carry_counts) == len(carried)
    assert all(count >= 1 for count in stage._carry_counts)
    blob = pickle.dumps(loader.save_state())
    assert len(blob) < 200_000, "no tensors in the state"
