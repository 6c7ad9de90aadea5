"""The ``llava`` encoder with sequence packing (from the ``PluginTaskEncoder`` base), on real data.

A crude ``llava`` dataset (demo generator, mixed image sizes) is read twice through the
datamodule, without and with first-fit-decreasing packing; every sample's tokens, labels and
pixel values must be the same in both.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

import energon_plugins
from energon_plugins.testing import build_demo_tokenizer, write_dataset


@pytest.fixture(scope="module")
def tok():
    return build_demo_tokenizer("llava")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("llava-pack")
    return {
        "llava": write_dataset(
            root / "llava",
            kind="llava",
            num_samples=24,
            samples_per_shard=4,
            image_size=((20, 16), (72, 60)),
            seed=3,
        )
    }


# --------------------------------------------------------------------------- packing


def per_sample(batch):
    """Split a batch (packed or not) into ``key -> (ids, labels, pixels)``; one image each.

    Packed rows are cut where the position ids restart.
    """
    out, image = {}, 0
    for row, joined in enumerate(batch.__key__):
        pos = batch.position_ids[row].tolist()
        starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
        for k, key in enumerate(joined.split(",")):
            a, b = starts[k], starts[k + 1]
            out[key] = (
                batch.input_ids[row, a:b],
                batch.labels[row, a:b],
                batch.pixel_values[image : image + 1],
            )
            image += 1
    assert image == len(batch.pixel_values) == int(batch.num_images.sum())
    return out


def test_packed_batches_carry_the_same_tokens(data, tok):
    info = data["llava"]
    wanted = set(info.split_keys["train"])
    strategy = energon_plugins.create("packing_strategy", "first-fit-decreasing")

    def collect(**packing):
        dm = energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            None,
            seq_length=2048,
            micro_batch_size=2,
            num_workers=0,
            shuffle_buffer_size=8,
            task_encoder={"name": "llava", "options": {"padding": "longest"}},
            **packing,
            batch_format=None,  # the task encoder's own batch
        )
        found, packed_rows, loader = {}, 0, dm.train_dataloader()
        for _ in range(200):
            batch = next(loader)
            if packing:
                assert batch.packed_seq_params is not None and batch.attention_mask is None
                packed_rows += sum("," in k for k in batch.__key__)
            for key, value in per_sample(batch).items():
                found.setdefault(key, value)
            if set(found) >= wanted:
                return found, packed_rows
        raise AssertionError(f"keys never seen: {sorted(wanted - set(found))}")

    plain, _ = collect()
    packed, packed_rows = collect(packing=strategy, packing_buffer_size=8)
    assert packed_rows > 0, "some rows should hold several samples"
    for key in wanted:
        p_ids, p_labels, p_pixels = plain[key]
        q_ids, q_labels, q_pixels = packed[key]
        real = int((p_ids != tok.pad_token_id).sum())
        assert len(q_ids) == real and torch.equal(q_ids, p_ids[:real]), key
        assert torch.equal(q_labels, p_labels[:real]), key
        assert torch.equal(q_pixels, p_pixels), key


def test_resume_with_packing_gives_the_same_batches(data, tok):
    """Cooking, encoding and packing are stateless: a restored loader continues exactly."""
    info = data["llava"]
    strategy = energon_plugins.create("packing_strategy", "first-fit-decreasing")

    def loader():
        return energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            None,
            seq_length=2048,
            micro_batch_size=2,
            num_workers=0,
            shuffle_buffer_size=8,
            packing=strategy,
            packing_buffer_size=6,
            task_encoder={"name": "llava", "options": {"padding": "longest"}},
            batch_format=None,  # the task encoder's own batch
        ).train_dataloader()

    first = loader()
    for _ in range(3):
        next(first)
    state = first.save_state()
    expected = [next(first) for _ in range(3)]
    second = loader()
    second.restore_state(state)
    for want in expected:
        got = next(second)
        assert got.__key__ == want.__key__
        assert torch.equal(got.input_ids, want.input_ids)
        assert torch.equal(got.pixel_values, want.pixel_values)
