"""The ``qwen2-vl`` encoder with sequence packing (from the ``PluginTaskEncoder`` base), on real data.

A crude ``chatml`` dataset (demo generator, one to three images of mixed sizes per sample) is
read twice through the datamodule, without and with first-fit-decreasing packing; every
sample's tokens, labels, pixel rows and grids must be the same in both (pixel values
concatenated and grids stacked in the order of the packed sub-sequences).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

import energon_plugins
from energon_plugins.testing import build_demo_tokenizer, write_dataset


@pytest.fixture(scope="module")
def tok():
    return build_demo_tokenizer("qwen2")


@pytest.fixture(scope="module")
def ids(tok):
    return {"<|image_pad|>": tok.convert_tokens_to_ids("<|image_pad|>")}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen-pack")
    return {
        "chatml": write_dataset(
            root / "chatml",
            kind="chatml",
            num_samples=24,
            samples_per_shard=4,
            image_size=((12, 10), (220, 160)),
            seed=11,
        )
    }


def processor():
    return energon_plugins.create(
        "image_processor", "qwen2-vl", {"min_pixels": 28 * 28 * 4, "max_pixels": 28 * 28 * 24}
    )


# --------------------------------------------------------------------------- packing


def per_sample(batch, images_of):
    """Split a batch (packed or not) into ``key -> (ids, labels, pixels, grid)``.

    Packed rows are cut where the position ids restart; images are taken in order, as many
    per sample as ``images_of[key]``.
    """
    out = {}
    patches = batch.image_grid_thw.prod(dim=-1)
    image, pixel = 0, 0
    for row, joined in enumerate(batch.__key__):
        pos = batch.position_ids[row].tolist()
        starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
        for k, key in enumerate(joined.split(",")):
            a, b = starts[k], starts[k + 1]
            n = images_of[key]
            rows = int(patches[image : image + n].sum())
            out[key] = (
                batch.input_ids[row, a:b],
                batch.labels[row, a:b],
                batch.pixel_values[pixel : pixel + rows],
                batch.image_grid_thw[image : image + n],
            )
            image, pixel = image + n, pixel + rows
    assert image == len(batch.image_grid_thw) and pixel == len(batch.pixel_values)
    return out


def test_packed_batches_carry_the_same_tokens(data, tok, ids):
    info = data["chatml"]
    images_of = {k: len(r["image_sizes"]) for k, r in info.samples.items()}
    wanted = set(info.split_keys["train"])
    strategy = energon_plugins.create("packing_strategy", "first-fit-decreasing")

    def collect(**packing):
        dm = energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            processor(),
            seq_length=512,
            micro_batch_size=2,
            num_workers=0,
            shuffle_buffer_size=8,
            task_encoder={"name": "qwen2-vl", "options": {"padding": "longest"}},
            **packing,
            batch_format=None,  # the task encoder's own batch
        )
        found, packed_rows, loader = {}, 0, dm.train_dataloader()
        for _ in range(200):
            batch = next(loader)
            if packing:
                assert batch.packed_seq_params is not None and batch.attention_mask is None
                packed_rows += sum("," in k for k in batch.__key__)
            for key, value in per_sample(batch, images_of).items():
                found.setdefault(key, value)
            if set(found) >= wanted:
                return found, packed_rows
        raise AssertionError(f"keys never seen: {sorted(wanted - set(found))}")

    plain, _ = collect()
    packed, packed_rows = collect(packing=strategy, packing_buffer_size=8)
    assert packed_rows > 0, "some rows should hold several samples"
    for key in wanted:
        p_ids, p_labels, p_pixels, p_grid = plain[key]
        q_ids, q_labels, q_pixels, q_grid = packed[key]
        real = int((p_ids != tok.pad_token_id).sum())
        assert torch.equal(q_ids, p_ids[: len(q_ids)]) and len(q_ids) == real, key
        assert torch.equal(q_labels, p_labels[:real]), key
        assert torch.equal(q_grid, p_grid) and torch.equal(q_pixels, p_pixels), key


def test_overlong_cut_for_packing_keeps_no_open_vision_start(data, tok):
    """An overlong sample cut by the packing stage ends before its first image, cleanly."""
    from energon_plugins import BuildContext

    info = data["chatml"]
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(info.path),
        tok,
        processor(),
        seq_length=4096,
        micro_batch_size=1,
        num_workers=0,
        task_encoder={"name": "qwen2-vl", "options": {"padding": "longest"}},
        batch_format=None,  # the task encoder's own batch
    )
    batch = next(dm.train_dataloader())
    start_id = tok.convert_tokens_to_ids("<|vision_start|>")
    seq = batch.input_ids[0, : int(batch.attention_mask[0].sum())]
    first = int((seq == start_id).nonzero()[0, 0])
    ctx = BuildContext(tokenizer=tok, image_processor=processor(), seq_length=4096)
    enc = energon_plugins.create("task_encoder", "qwen2-vl", None, ctx)
    from energon_plugins import EncodedSample

    sample = EncodedSample(
        __key__="k",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        input_ids=seq,
        labels=batch.labels[0, : len(seq)],
        loss_mask=batch.loss_mask[0, : len(seq)],
        pixel_values=batch.pixel_values,
        image_grid_thw=batch.image_grid_thw,
        num_images=int(batch.num_images[0]),
        seq_lengths=[len(seq)],
    )
    cut = enc.truncate_for_packing(sample, first + 5)
    assert cut.input_ids.tolist() == seq[:first].tolist()
    assert cut.num_images == 0 and cut.pixel_values is None and cut.image_grid_thw is None
    assert cut.seq_lengths == [first] and len(cut.labels) == len(cut.loss_mask) == first


def test_resume_with_packing_gives_the_same_batches(data, tok):
    """Cooking, encoding and packing are stateless: a restored loader continues exactly."""
    info = data["chatml"]
    strategy = energon_plugins.create("packing_strategy", "first-fit-decreasing")

    def loader():
        return energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            processor(),
            seq_length=512,
            micro_batch_size=2,
            num_workers=0,
            shuffle_buffer_size=8,
            packing=strategy,
            packing_buffer_size=6,
            task_encoder={"name": "qwen2-vl", "options": {"padding": "longest"}},
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
        assert torch.equal(got.image_grid_thw, want.image_grid_thw)
        assert torch.equal(got.pixel_values, want.pixel_values)
