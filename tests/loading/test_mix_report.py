"""The realised mix of a blend next to its configured weights (``loading.mix_report``).

On a real three-leaf blend with nested weights (``tests/_mix_blend.py``): the configured shares
are each weight over its list's sum, multiplied down the nesting; over 300 samples read through
the datamodule the realised sample shares are within a binomial tolerance of them.
"""

import math

import pytest

import energon_plugins
from energon_plugins.loading.mix_report import MixRow, configured_shares, realised_mix
from tests._mix_blend import CONFIGURED, HEADER, write_nested_blend

SAMPLES = 300
MICRO_BATCH = 4


@pytest.fixture(scope="module")
def blend(data_root, vqa_dataset, captioning_dataset, interleaved_dataset):
    return write_nested_blend(data_root)


def test_configured_shares_multiply_nested_weights(blend):
    shares = configured_shares(blend)
    assert list(shares) == list(CONFIGURED), "named as written, in the order of the YAMLs"
    assert shares == pytest.approx(CONFIGURED, abs=1e-12)


def test_a_split_that_is_not_a_weighted_blend_has_no_configured_shares(data_root, vqa_dataset, blend):
    assert configured_shares(vqa_dataset.path) is None, "a plain dataset"
    assert configured_shares(blend, split="val") is None, "a split the metadataset lacks"
    splits = {
        "alone": "  train:\n    path: vqa\n",
        "epochized": "  train:\n    blend_epochized:\n      - repetitions: 2\n        path: vqa\n",
        "zero-weight": "  train:\n    blend:\n      - weight: 0\n        path: vqa\n"
        "      - weight: 1\n        path: captioning\n",
    }
    for name, split in splits.items():
        path = data_root / f"mix-{name}.yaml"
        path.write_text(HEADER + split)
        assert configured_shares(path) is None, name


def test_realised_mix_lists_every_configured_source_then_the_others():
    stats = {
        "a": {"samples": 3, "tokens": 30, "loss_tokens": 10},
        "stray": {"samples": 1, "tokens": 10, "loss_tokens": 0},
    }
    rows = realised_mix(stats, {"a": 0.75, "b": 0.25})
    assert [row.source for row in rows] == ["a", "b", "stray"]
    a, b, stray = rows
    assert a == MixRow("a", 0.75, 3, 0.75, 0.75, 1.0)
    assert b == MixRow("b", 0.25, 0, 0.0, 0.0, 0.0), "configured but not read yet"
    assert stray.configured is None and stray.sample_share == 0.25
    assert [row.sample_share for row in realised_mix({}, {"a": 1.0})] == [0.0], "nothing read"


def test_realised_sample_shares_follow_the_configured_weights(blend, tokenizer, small_clip_processor):
    """Energon draws each sample's leaf independently with the configured shares, so a leaf's
    count over n samples is binomial: its realised share has standard deviation
    sqrt(p (1 - p) / n) (2.9 points at p = 50%, n = 300). Four of them bound a run drawn with
    any seed but about once in 16,000 per leaf, and still tell the right shares from the wrong
    readings of the YAML (a third each, or 20 / 20 / 60%: off by 13 to 30 points)."""
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(blend),
        tokenizer,
        small_clip_processor,
        seq_length=256,
        micro_batch_size=MICRO_BATCH,
        num_workers=0,
        shuffle_buffer_size=10,
    )
    loader = dm.train_dataloader()
    for _ in range(SAMPLES // MICRO_BATCH):
        next(loader)
    rows = realised_mix(loader.stats(), configured_shares(blend))
    dm.close()
    assert [row.source for row in rows] == list(CONFIGURED), "no source the blend does not hold"
    assert sum(row.samples for row in rows) == SAMPLES
    for row in rows:
        p = CONFIGURED[row.source]
        tolerance = 4 * math.sqrt(p * (1 - p) / SAMPLES)
        assert row.configured == pytest.approx(p)
        assert abs(row.sample_share - p) <= tolerance, (row, tolerance)
    for share in ("sample_share", "token_share", "loss_token_share"):
        assert sum(getattr(row, share) for row in rows) == pytest.approx(1.0)
    assert all(row.token_share > 0 and row.loss_token_share > 0 for row in rows)
