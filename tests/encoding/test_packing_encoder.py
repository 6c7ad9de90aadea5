"""Packing in the task encoder, on real Energon datasets read through Energon's loader.

Packed batches are checked sample by sample against the same samples encoded unpacked:
tokens, labels, loss masks, position ids, images, ``cu_seqlens`` (and the padded variant).
Also: overlong policies counted, every sample exactly once over a finite pass with and without
carry-over, fill ratio with carry-over, and configuration errors.
"""

import dataclasses
from collections import Counter

import pytest
import torch

import energon_plugins
from energon_plugins import ConfigError
from energon_plugins.encoding.task_encoders.multimodal import MultimodalTaskEncoder
from energon_plugins.encoding.task_encoders.options import MultimodalOptions
from energon_plugins.encoding.task_encoders.packing import PackedSample, PackingMixin

SEQ = 128
IMAGE_TOKENS = 6
IGNORE = -100


def strategy(name="first-fit-decreasing", **options):
    return energon_plugins.create("packing_strategy", name, options or None)


def pass_length_read(dm):
    """``len()`` of the validation loader (for packed batches it reads one pass to count
    them) and the validation encoder's counts after it, to compare a later pass against."""
    assert len(dm.val_dataloader()) >= 1
    return Counter(dm.validation_task_encoder.error_counts())


def make_dm(
    info, tokenizer, processor, packing, *, buffer=6, seq=SEQ, enc_cls=None, enc_options=None, **kwargs
):
    """A datamodule whose train and val encoders pack with ``packing``; its loaders yield the
    encoder's own batches (``batch_format=None``), which these tests are about."""
    args = dict(
        seq_length=seq,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        packing_buffer_size=buffer,
        packing=packing,
        batch_format=None,
    )
    args.update(kwargs)
    dm = energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)
    cls = enc_cls or MultimodalTaskEncoder
    options = MultimodalOptions(image_tokens=IMAGE_TOKENS, **(enc_options or {}))
    dm.task_encoder = cls(dm.build_context("train"), options)
    dm.validation_task_encoder = cls(dm.build_context("val"), options)
    return dm


@pytest.fixture(scope="module")
def unpacked(vqa_dataset, tokenizer, clip_processor):
    """Every sample of the dataset (train and val) encoded unpacked: key -> EncodedSample."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from energon_plugins.encoding.image_processors.hf import wrap_image_processor

    processor = wrap_image_processor(clip_processor)  # as the datamodule does
    encoder = MultimodalTaskEncoder(
        energon_plugins.BuildContext(tokenizer=tokenizer, image_processor=processor, seq_length=SEQ),
        MultimodalOptions(image_tokens=IMAGE_TOKENS),
    )
    out = {}
    for split in ("train", "val"):
        dataset = get_val_dataset(
            str(vqa_dataset.path),
            split_part=split,
            batch_size=None,
            task_encoder=encoder,
            worker_config=WorkerConfig.default_worker_config(0),
        )
        for sample in get_loader(dataset):
            out[sample.__key__] = sample
    assert len(out) == len(vqa_dataset.samples)
    return out


def row_keys(batch):
    return [key.split(",") for key in batch.__key__]


def check_packed_batch(batch, unpacked, multiple, capacity=SEQ):
    """Compare every sub-sequence of every row with the unpacked encoding of its sample."""
    params = batch.packed_seq_params
    assert params is not None and params.qkv_format == "thd"
    assert batch.attention_mask is None
    width = batch.input_ids.shape[1]
    cu_real = params.cu_seqlens_q.tolist()
    cu_laid = params.cu_seqlens_q_padded.tolist() if multiple > 1 else cu_real
    assert params.cu_seqlens_kv.tolist() == cu_real
    if multiple > 1:
        assert params.cu_seqlens_kv_padded.tolist() == cu_laid
    else:
        assert params.cu_seqlens_q_padded is None
    expected_real, expected_laid = [0], [0]
    pixel_rows = []
    for row, keys in enumerate(row_keys(batch)):
        offset = 0
        for key in keys:
            want = unpacked[key]
            n = want.length
            laid = -(-n // multiple) * multiple
            end = offset + n
            assert torch.equal(batch.input_ids[row, offset:end], want.input_ids), key
            assert torch.equal(batch.labels[row, offset:end], want.labels), key
            assert torch.equal(batch.loss_mask[row, offset:end], want.loss_mask), key
            assert torch.equal(batch.position_ids[row, offset : offset + laid], torch.arange(laid))
            assert (batch.labels[row, end : offset + laid] == IGNORE).all()
            assert (batch.loss_mask[row, end : offset + laid] == 0).all()
            # the flattened THD offsets of this sub-sequence
            assert cu_laid[len(expected_laid) - 1] == row * width + offset
            expected_real.append(expected_real[-1] + n)
            expected_laid.append(expected_laid[-1] + laid)
            if want.pixel_values is not None:
                pixel_rows.append(want.pixel_values)
            offset += laid
        assert offset <= capacity
        assert int(batch.num_images[row]) == sum(unpacked[k].num_images for k in keys)
        if offset < width:  # the padding tail is one segment of its own
            expected_real.append(expected_real[-1] + width - offset)
            expected_laid.append(expected_laid[-1] + width - offset)
            assert (batch.loss_mask[row, offset:] == 0).all()
    assert cu_real == expected_real
    assert cu_laid == expected_laid
    assert params.max_seqlen_q == max(b - a for a, b in zip(expected_laid, expected_laid[1:]))
    assert torch.equal(batch.pixel_values, torch.cat(pixel_rows))


@pytest.mark.parametrize("multiple", [1, 8])
def test_packed_batches_match_the_unpacked_samples(
    vqa_dataset, tokenizer, clip_processor, unpacked, multiple
):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, strategy(pad_to_multiple_of=multiple))
    loader = dm.train_dataloader()
    subsequences = 0
    for _ in range(4):
        batch = next(loader)
        assert batch.input_ids.shape == (2, SEQ)
        check_packed_batch(batch, unpacked, multiple)
        subsequences += sum(len(k) for k in row_keys(batch))
    assert subsequences > 8, "rows hold several samples"
    stats = dm.task_encoder.packing_counts()
    assert stats["packs"] >= 8 and stats["samples"] >= subsequences
    assert dm.task_encoder.error_counts() == {}


def test_packed_sample_fields(vqa_dataset, tokenizer, clip_processor, unpacked):
    encoder = make_dm(vqa_dataset, tokenizer, clip_processor, strategy(pad_to_multiple_of=4)).task_encoder
    keys = sorted(unpacked)[:3]
    pack = encoder.pack_selected_samples([unpacked[k] for k in keys])
    assert isinstance(pack, PackedSample)
    assert pack.sub_keys == keys and pack.__key__ == ",".join(keys)
    assert pack.real_seq_lengths == [unpacked[k].length for k in keys]
    assert pack.seq_lengths == [-(-unpacked[k].length // 4) * 4 for k in keys]
    assert pack.length == sum(pack.seq_lengths)
    assert pack.num_images == 3 and pack.pixel_values.shape[0] == 3
    assert pack.image_token_counts == [c for k in keys for c in unpacked[k].image_token_counts]


def test_visual_and_token_fields_follow_packing_and_batching(
    vqa_dataset, tokenizer, clip_processor, unpacked
):
    """Model-specific vision inputs are concatenated per image; per-token fields stay aligned."""
    encoder = make_dm(vqa_dataset, tokenizer, clip_processor, strategy(pad_to_multiple_of=4)).task_encoder
    keys = sorted(unpacked)[:4]
    samples = [
        dataclasses.replace(
            unpacked[k],
            visual={"image_sizes": torch.tensor([[i, i + 1]])},
            token_fields={"token_type_ids": (unpacked[k].input_ids == encoder.image_token_id).long()},
        )
        for i, k in enumerate(keys)
    ]
    packs = [encoder.pack_selected_samples(samples[:2]), encoder.pack_selected_samples(samples[2:])]
    for pack, group in zip(packs, (samples[:2], samples[2:])):
        assert torch.equal(pack.visual["image_sizes"], torch.cat([s.visual["image_sizes"] for s in group]))
        types = pack.token_fields["token_type_ids"]
        assert types.shape == pack.input_ids.shape
        assert torch.equal(types.bool(), pack.input_ids == encoder.image_token_id)
    batch = encoder.batch(packs)
    assert torch.equal(batch.visual["image_sizes"], torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4]]))
    types = batch.token_fields["token_type_ids"]
    assert types.shape == batch.input_ids.shape
    assert torch.equal(types.bool(), batch.input_ids == encoder.image_token_id)
    assert batch.image_token_counts.tolist() == [c for s in samples for c in s.image_token_counts]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_every_val_sample_once_per_finite_pass(vqa_dataset, tokenizer, clip_processor, unpacked, workers):
    for carry in (False, True):
        dm = make_dm(
            vqa_dataset,
            tokenizer,
            clip_processor,
            strategy(carry_over=carry),
            buffer=4,
            num_val_workers=workers,
        )
        for _ in range(2):
            keys = [k for batch in dm.val_dataloader().one_pass() for keys in row_keys(batch) for k in keys]
            assert sorted(keys) == sorted(vqa_dataset.split_keys["val"]), f"carry_over={carry}"


def test_finite_train_pass_with_carry_over_delivers_every_sample_once(
    vqa_dataset, tokenizer, clip_processor, unpacked
):
    dm = make_dm(
        vqa_dataset,
        tokenizer,
        clip_processor,
        strategy(carry_over=True, max_carries=3),
        buffer=5,
        repeat=False,
    )
    keys = []
    from energon_plugins.encoding.packing.carry_dataset import CarryOverPackingDataset
    from energon_plugins.loading.errors_policy import SkipCounts

    loader = dm.train_dataloader().dataloader
    stage = loader.dataset
    while not isinstance(stage, CarryOverPackingDataset):
        stage = stage.dataset
    most_carries = 0
    one_pass = SkipCounts().filter(loader)  # one pass, not the cycling wrapper
    for batch in one_pass:
        most_carries = max([most_carries, *stage._carry_counts])
        check_packed_batch(batch, unpacked, 1)
        keys.extend(k for row in row_keys(batch) for k in row)
    assert sorted(keys) == sorted(vqa_dataset.split_keys["train"])
    stats = dm.task_encoder.packing_counts()
    assert stats["carried"] > 0, "some samples were carried"
    assert 1 <= most_carries <= 3, "no sample waits more than max_carries buffers"
    assert stats["samples"] == len(keys)


def fill_ratio(dm, batches):
    loader = dm.train_dataloader()
    for _ in range(batches):
        next(loader)
    stats = dm.task_encoder.packing_counts()
    return stats["tokens"] / (stats["packs"] * dm.seq_length)


def test_carry_over_fills_packs_better(vqa_dataset, tokenizer, clip_processor):
    plain = fill_ratio(make_dm(vqa_dataset, tokenizer, clip_processor, strategy(), buffer=6), 12)
    carry = fill_ratio(
        make_dm(vqa_dataset, tokenizer, clip_processor, strategy(carry_over=True), buffer=6), 12
    )
    assert carry > plain + 0.05, (plain, carry)


def small_capacity(unpacked, keys):
    """An encoder class whose packs are one token shorter than the longest of ``keys``."""
    capacity = max(unpacked[k].length for k in keys) - 1
    return capacity, type("SmallCapacity", (MultimodalTaskEncoder,), {"packing_capacity": capacity})


@pytest.mark.parametrize("policy", ["truncate", "drop"])
def test_overlong_samples_follow_the_policy_and_are_counted(
    vqa_dataset, tokenizer, clip_processor, unpacked, policy
):
    val = vqa_dataset.split_keys["val"]
    capacity, cls = small_capacity(unpacked, val)
    overlong = {k for k in val if unpacked[k].length > capacity}
    assert overlong and len(overlong) < len(val), "the dataset has samples on both sides"
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, strategy(overlong=policy), buffer=4, enc_cls=cls)
    seen = []
    before = pass_length_read(dm)
    for batch in dm.val_dataloader().one_pass():
        seen.extend(k for keys in row_keys(batch) for k in keys)
        # no row holds more than the capacity (a truncated sample is cut to it)
        real = batch.loss_mask.shape[1] - (batch.input_ids == dm.task_encoder.pad_token_id).sum(1)
        assert (real <= capacity).all()
    assert len(seen) == len(set(seen))
    counts = dict(Counter(dm.validation_task_encoder.error_counts()) - before)
    if policy == "drop":
        assert set(seen) == set(val) - overlong
        assert counts == {"packing_overlong_dropped": len(overlong)}
    else:
        assert set(seen) == set(val)
        assert counts == {"packing_overlong_truncated": len(overlong)}


def test_truncated_sample_keeps_its_images_only_when_they_fit(
    vqa_dataset, tokenizer, clip_processor, unpacked
):
    encoder = make_dm(vqa_dataset, tokenizer, clip_processor, strategy()).task_encoder
    sample = unpacked[sorted(unpacked)[0]]
    image = (sample.input_ids == encoder.image_token_id).nonzero()[:, 0]
    last_image = int(image.max()) + 1
    kept = encoder.truncate_for_packing(sample, last_image + 1)
    assert kept.length == last_image + 1 and kept.num_images == 1 and kept.truncated
    cut = encoder.truncate_for_packing(sample, last_image - 1)
    assert cut.length == int(image.min()) and cut.num_images == 0 and cut.pixel_values is None


def test_overlong_error_stops_the_loader_naming_the_sample(vqa_dataset, tokenizer, clip_processor, unpacked):
    from megatron.energon.errors import FatalSampleError

    capacity, cls = small_capacity(unpacked, vqa_dataset.split_keys["val"])
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, strategy(overlong="error"), buffer=12, enc_cls=cls)
    with pytest.raises(
        FatalSampleError, match=rf"more than the capacity {capacity}.*vqa-\d+ \({capacity + 1}\)"
    ):
        list(dm.val_dataloader().one_pass())


# ---------------------------------------------------------------- configuration errors
def test_pad_multiple_must_divide_seq_length(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, strategy(pad_to_multiple_of=5))
    with pytest.raises(ConfigError, match="pad_to_multiple_of.*seq_length 128"):
        dm.train_dataloader()


def test_buffer_without_a_strategy_is_a_config_error(vqa_dataset, tokenizer, clip_processor):
    # a named encoder packs only with a strategy: the constructor refuses the call
    with pytest.raises(ConfigError, match="packing: packing_buffer_size is 6 but no packing"):
        make_dm(vqa_dataset, tokenizer, clip_processor, None)
    # an encoder object may pack on its own; ours says what is missing when the loader is built
    from energon_plugins.encoding.image_processors.hf import wrap_image_processor

    context = energon_plugins.BuildContext(
        tokenizer=tokenizer,
        image_processor=wrap_image_processor(clip_processor),
        seq_length=SEQ,
        packing_buffer_size=6,
    )
    encoder = MultimodalTaskEncoder(context, MultimodalOptions(image_tokens=IMAGE_TOKENS))
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=SEQ,
        num_workers=0,
        packing_buffer_size=6,
        task_encoder=encoder,
    )
    with pytest.raises(ConfigError, match="packing_buffer_size is set but no packing strategy"):
        dm.train_dataloader()


def test_packing_options_from_a_config(vqa_dataset):
    from energon_plugins.config import ConfigValidationError
    from energon_plugins.config.load import load_config

    base = {"path": str(vqa_dataset.path), "tokenizer": {"path": "unused"}}
    config = load_config(
        {
            **base,
            "packing_buffer_size": 8,
            "packing": {
                "name": "first-fit-decreasing",
                "options": {"carry_over": True, "pad_to_multiple_of": 4, "max_carries": 3},
            },
        },
        check_paths=False,
    )
    built = energon_plugins.create("packing_strategy", config.packing.name, config.packing.options)
    assert built.options.carry_over and built.options.pad_to_multiple_of == 4
    assert built.options.max_carries == 3 and built.options.min_fill == 0.995
    with pytest.raises(ConfigValidationError, match="packing_buffer_size"):
        load_config({**base, "packing": {"name": "ffd"}}, check_paths=False)
    with pytest.raises(ConfigValidationError, match=r"packing\.options\.pad_to_multiple_of"):
        load_config(
            {
                **base,
                "packing_buffer_size": 8,
                "packing": {"name": "ffd", "options": {"pad_to_multiple_of": 0}},
            },
            check_paths=False,
        )


def test_packing_selected_in_a_config_file_packs_the_builtin_encoder(vqa_dataset, tmp_path, unpacked):
    from energon_plugins.synthetic import save_demo_tokenizer

    save_demo_tokenizer(tmp_path / "tok")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"path: {vqa_dataset.path}\n"
        "tokenizer: {path: tok}\n"
        f"seq_length: {SEQ}\n"
        "micro_batch_size: 2\n"
        "global_batch_size: 2\n"
        "num_workers: 0\n"
        "packing_buffer_size: 5\n"
        "packing: {name: first-fit-decreasing, options: {carry_over: true, pad_to_multiple_of: 4}}\n"
        f"task_encoder: {{name: multimodal, options: {{image_tokens: {IMAGE_TOKENS}}}}}\n"
        "batch_format: null\n"
    )
    dm = energon_plugins.EnergonMultiModalDataModule.from_config(config)
    assert isinstance(dm.task_encoder, PackingMixin)
    assert dm.task_encoder.packing_options.carry_over
    keys = []
    for batch in dm.val_dataloader().one_pass():
        check_packed_batch(batch, unpacked, 4)
        keys.extend(k for row in row_keys(batch) for k in row)
    assert sorted(keys) == sorted(vqa_dataset.split_keys["val"])


class SelectOnly:
    """A third-party strategy with only ``select``: one sample per pack, every other left out."""

    def __init__(self, overfill=False):
        self.overfill = overfill

    def select(self, lengths, capacity):
        if self.overfill:
            return [list(range(len(lengths)))]
        return [[i] for i in range(0, len(lengths), 2)]


def test_select_only_strategy_left_out_samples_are_counted(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, SelectOnly(), buffer=4)
    before = pass_length_read(dm)
    seen = [k for batch in dm.val_dataloader().one_pass() for keys in row_keys(batch) for k in keys]
    val = vqa_dataset.split_keys["val"]
    assert len(seen) == len(set(seen)) and set(seen) < set(val)
    counts = dict(Counter(dm.validation_task_encoder.error_counts()) - before)
    assert counts == {"packing_left_out": len(val) - len(seen)}


def test_strategy_that_overfills_a_pack_stops_the_loader(vqa_dataset, tokenizer, clip_processor):
    from megatron.energon.errors import FatalSampleError

    dm = make_dm(vqa_dataset, tokenizer, clip_processor, SelectOnly(overfill=True), buffer=12)
    with pytest.raises(FatalSampleError, match=r"SelectOnly.*> capacity 128"):
        list(dm.val_dataloader().one_pass())
