"""Bad samples on real Energon datasets: a corrupt image, corrupt JSON, a missing JSON field and
a truncated shard, under ``on_error: skip`` (the default: every good sample arrives, skips are
counted exactly by reason, with workers too) and ``on_error: raise`` (a clear error naming the
sample or shard).
"""

import collections
import logging
import re

import pytest
import torch

import energon_plugins
from energon_plugins.loading.errors_policy import BadSampleError, TruncatedShardError, classify_error
from energon_plugins.synthetic import write_dataset

SEQ = 128
REASONS = ("image", "json", "missing_field", "truncated_shard")


def make_dm(info, tokenizer, processor, *, on_error="skip", **kwargs):
    args = dict(
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6, "on_error": on_error}},
    )
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)


@pytest.fixture(scope="module")
def bad_dataset(tmp_path_factory):
    """8 shards of 5: 2 train, 6 val; 2 corrupt images, 2 corrupt JSON, 2 missing fields, and
    the last shard (in val) cut in half."""
    info = write_dataset(
        tmp_path_factory.mktemp("bad") / "d",
        kind="vqa",
        num_samples=40,
        samples_per_shard=5,
        split_ratio=(("train", 0.25), ("val", 0.75)),
        corrupt={"image": 2, "json": 2, "missing_field": 2, "truncated_shard": 1},
    )
    return info


def expected_counts(info, split):
    keys = set(info.split_keys[split])
    return {reason: len(set(info.corrupt_keys.get(reason, ())) & keys) for reason in REASONS}


def real_batches(loader):
    """One validation pass without the zero-loss fillers (a pass is as long as Energon's
    count of batches, an upper bound when samples are skipped)."""
    from energon_plugins.loading.validation import is_padding_batch

    return [batch for batch in loader.one_pass() if not is_padding_batch(batch)]


def good(info, split):
    return sorted(set(info.split_keys[split]) & info.good_keys)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_every_good_sample_arrives_and_counts_are_exact(bad_dataset, tokenizer, clip_processor, workers):
    expected = expected_counts(bad_dataset, "val")
    assert all(expected[r] > 0 for r in REASONS), "the fixture puts every kind of damage in val"
    dm = make_dm(bad_dataset, tokenizer, clip_processor, num_val_workers=workers)
    for _ in range(2):  # every pass: the same samples, the counts start again
        loader = dm.val_dataloader()
        keys = [k for batch in real_batches(loader) for k in batch["__keys__"]]
        assert sorted(keys) == good(bad_dataset, "val")
        assert len(keys) == len(set(keys))
        assert loader.skip_counts() == {r: n for r, n in expected.items() if n}


def test_skips_are_logged_with_key_and_reason(bad_dataset, tokenizer, clip_processor, caplog):
    dm = make_dm(bad_dataset, tokenizer, clip_processor)
    with caplog.at_level(logging.WARNING, logger="energon_plugins.loading.errors_policy"):
        list(dm.val_dataloader().one_pass())
    text = caplog.text
    for reason in ("image", "json", "missing_field"):
        for key in set(bad_dataset.corrupt_keys[reason]) & set(bad_dataset.split_keys["val"]):
            assert f"key {key!r}" in text and f"({reason})" in text
    assert "is truncated" in text and bad_dataset.shards[-1].name in text
    # webdataset's DecodingError carries no message: the part, the sample and the cause are named.
    assert "DecodingError: cannot decode part" in text
    assert not re.search(r"DecodingError\s*$", text, re.M)


def test_raise_names_the_sample(bad_dataset, tokenizer, clip_processor):
    dm = make_dm(bad_dataset, tokenizer, clip_processor, on_error="raise")
    with pytest.raises(Exception) as info:
        list(dm.val_dataloader().one_pass())
    text = str(info.value)
    corrupt = {k for r in ("image", "json", "missing_field") for k in bad_dataset.corrupt_keys[r]}
    assert isinstance(info.value, BadSampleError) or "BadSampleError" in text
    assert any(repr(k) in text for k in corrupt), text
    assert "on_error='raise'" in text


@pytest.fixture(scope="module")
def truncated_dataset(tmp_path_factory):
    """Only damage: the last of 4 shards (in val) is cut in half."""
    return write_dataset(
        tmp_path_factory.mktemp("trunc") / "d",
        kind="vqa",
        num_samples=20,
        samples_per_shard=5,
        split_ratio=(("train", 0.5), ("val", 0.5)),
        corrupt={"truncated_shard": 1},
    )


def test_truncated_shard_is_skipped_and_counted(truncated_dataset, tokenizer, clip_processor):
    lost = truncated_dataset.corrupt_keys["truncated_shard"]
    assert 0 < len(lost) < 5
    loader = make_dm(truncated_dataset, tokenizer, clip_processor).val_dataloader()
    keys = [k for batch in real_batches(loader) for k in batch["__keys__"]]
    assert sorted(keys) == good(truncated_dataset, "val")
    assert loader.skip_counts() == {"truncated_shard": len(lost)}


def test_truncated_shard_under_raise_names_the_shard(truncated_dataset, tokenizer, clip_processor):
    loader = make_dm(truncated_dataset, tokenizer, clip_processor, on_error="raise").val_dataloader()
    with pytest.raises(TruncatedShardError, match=truncated_dataset.shards[-1].name) as info:
        list(loader.one_pass())
    assert "is truncated" in str(info.value) and "on_error='skip'" in str(info.value)


@pytest.fixture(scope="module")
def bad_train_dataset(tmp_path_factory):
    """8 shards of 5: 6 train, 2 val; 3 corrupt images, 3 corrupt JSON, 3 missing fields."""
    return write_dataset(
        tmp_path_factory.mktemp("bad-train") / "d",
        kind="vqa",
        num_samples=40,
        samples_per_shard=5,
        split_ratio=(("train", 0.75), ("val", 0.25)),
        corrupt={"image": 3, "json": 3, "missing_field": 3},
    )


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_training_counts_are_exact_across_restore(bad_train_dataset, tokenizer, clip_processor, workers):
    """The counts after a restore equal those of the uninterrupted loader, batch by batch.

    Without workers Energon restores the pipeline state directly (the counts must come from
    the state); with workers it replays from a worker checkpoint (the counts are replayed too).
    """
    bad_dataset = bad_train_dataset

    def dm():
        return make_dm(
            bad_dataset,
            tokenizer,
            clip_processor,
            num_workers=workers,
            micro_batch_size=1,
            shuffle_buffer_size=None,
        )

    first = dm()
    loader = first.train_dataloader()
    for _ in range(6):
        next(loader)
    state = loader.save_state()
    at_save = loader.skip_counts()
    keys = []
    counts = []
    for _ in range(12):
        keys.append(next(loader)["__keys__"])
        counts.append(loader.skip_counts())
    train_bad = {k for r in ("image", "json", "missing_field") for k in bad_dataset.corrupt_keys[r]} & set(
        bad_dataset.split_keys["train"]
    )
    assert train_bad, "the fixture puts damage in train"
    assert sum(counts[-1].values()) > sum(at_save.values()), "skips happen after the save"
    assert not {k for batch in keys for k in batch} & train_bad

    second = dm()
    restored = second.train_dataloader()
    restored.restore_state(state)
    assert restored.skip_counts() == at_save
    for want_keys, want_counts in zip(keys, counts, strict=True):
        assert next(restored)["__keys__"] == want_keys
        assert restored.skip_counts() == want_counts


def test_encoder_skips_are_counted_with_the_loader_ones(bad_dataset, tokenizer, clip_processor):
    """The encoder's own skips (here: samples too long, truncation='drop') join the counts."""
    roomy = make_dm(bad_dataset, tokenizer, clip_processor, micro_batch_size=1)
    lengths = {}
    for batch in real_batches(roomy.val_dataloader()):
        lengths[batch["__keys__"][0]] = int(batch.attention_mask.sum())
    seq = sorted(lengths.values())[len(lengths) // 2]
    too_long = sum(1 for n in lengths.values() if n > seq)
    assert 0 < too_long < len(lengths)

    strict = energon_plugins.EnergonMultiModalDataModule(
        str(bad_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=seq,
        micro_batch_size=1,
        num_workers=0,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6, "truncation": "drop"}},
    )
    loader = strict.val_dataloader()
    arrived = [batch["__keys__"][0] for batch in real_batches(loader)]
    counts = loader.skip_counts()
    assert counts.pop("too_long") == too_long
    assert len(arrived) + too_long == len(lengths)
    assert counts == {r: n for r, n in expected_counts(bad_dataset, "val").items() if n}


def test_bench_reports_the_skip_counts(bad_train_dataset, tokenizer, clip_processor):
    from energon_plugins.cli.bench_cmd import run_bench

    dm = make_dm(bad_train_dataset, tokenizer, clip_processor, micro_batch_size=1, shuffle_buffer_size=None)
    result = run_bench(dm, 25)
    assert result["skipped"] == dm.skip_counts()
    assert set(result["skipped"]) <= {"image", "json", "missing_field"}
    assert sum(result["skipped"].values()) > 0


def test_classify_error_reasons():
    from webdataset.autodecode import DecodingError

    assert classify_error(DecodingError(k="png")) == "image"
    assert classify_error(DecodingError(k="0.jpg")) == "image"
    assert classify_error(DecodingError(k="json")) == "json"
    assert classify_error(DecodingError(k="1.mp4")) == "video"
    assert classify_error(ValueError("Unexpected end of tar file: a.tar")) == "truncated_shard"
    assert classify_error(KeyError("x")) == "KeyError"
    counts = collections.Counter(classify_error(e) for e in [DecodingError(k="txt")] * 2)
    assert counts == {"decode:txt": 2}
    assert torch  # imported for the loaders' tensors
