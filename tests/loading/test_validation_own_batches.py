"""Validation with a task encoder of the user's own (issue 25), and the endless-loop warning.

Energon's own ``DefaultTaskEncoder`` batches a VQA dataset into ``VQASample`` batches: no
``loss_mask``, no ``labels``, so no zero-loss filler can be made from them. They pass through
the validation loader unchanged whenever no rank runs short; when one would, every rank raises
the same error at the first pass. The datasets are real Energon datasets written by the demo
generator.
"""

import json
import types
import warnings
from pathlib import Path

import pytest
from megatron.energon import DefaultTaskEncoder

import energon_plugins
from energon_plugins.errors import ConfigError
from energon_plugins.loading.validation import EndlessValidationWarning
from tests._ranks import run_worker

WORKER = Path(__file__).with_name("own_batches_worker.py")
MICRO_BATCH = 4


def own_datamodule(dataset, **kwargs):
    """A datamodule over ``dataset`` with Energon's ``DefaultTaskEncoder`` (no tokenizer)."""
    args = dict(seq_length=64, micro_batch_size=MICRO_BATCH, num_workers=0, task_encoder=DefaultTaskEncoder())
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(dataset.path), None, **args)


def pass_batches(dataset) -> int:
    """Batches of one pass over the whole val split (a single rank)."""
    return -(-len(dataset.split_keys["val"]) // MICRO_BATCH)


def evaluate(iterator, eval_iters):
    """Megatron-Bridge's ``evaluate``: ``next()`` eval_iters times, no StopIteration handling."""
    return [next(iterator) for _ in range(eval_iters)]


# ------------------------------------------------------------------ a user's own batch type
def test_own_batches_pass_through_unchanged_at_world_size_one(vqa_dataset):
    dm = own_datamodule(vqa_dataset)
    loader = dm.val_dataloader()
    validation = iter(loader)
    first = next(validation)
    assert type(first).__name__ == "VQASample" and not hasattr(first, "loss_mask")
    assert len(loader) == pass_batches(vqa_dataset)
    runs = [[first, *evaluate(validation, len(loader) - 1)]]
    runs += [evaluate(validation, len(loader)) for _ in range(2)]
    keys = [[key for batch in run for key in batch.__key__] for run in runs]
    assert keys[0] == keys[1] == keys[2], "every evaluation reads the same batches"
    assert sorted(keys[0]) == sorted(vqa_dataset.split_keys["val"]), "each sample once"


def test_own_batches_pass_through_with_val_batches_per_evaluation(vqa_dataset):
    dm = own_datamodule(vqa_dataset, val_batches_per_evaluation=2)
    validation = iter(dm.val_dataloader())
    runs = [evaluate(validation, 2) for _ in range(3)]
    keys = [[list(batch.__key__) for batch in run] for run in runs]
    assert keys[0] == keys[1] == keys[2]
    assert [k for batch in keys[0] for k in batch] == sorted(vqa_dataset.split_keys["val"])[:8]


def test_a_rank_that_would_run_short_on_own_batches_is_told_both_ways_out(vqa_dataset):
    full = pass_batches(vqa_dataset)
    dm = own_datamodule(vqa_dataset, val_batches_per_evaluation=full + 1)
    validation = iter(dm.val_dataloader())
    with pytest.raises(ConfigError) as info:
        next(validation)  # decided at the first batch, before any is handed out
    text = str(info.value)
    for words in (
        "DefaultTaskEncoder",
        "VQASample",
        "no loss_mask or labels",
        f"only {full} real batch(es)",
        f"takes {full + 1}",
        f"val_batches_per_evaluation={full}",
        "same number of validation batches",
        "return batches with a loss_mask or labels tensor",
    ):
        assert words in text, (words, text)


def test_megatron_bridges_builder_call_with_energons_default_encoder(vqa_dataset):
    """``EnergonDatasetBuilder.build``'s keywords (see test_bridge_replay.py), with the user's
    encoder object for training and validation and Bridge's stand-in process groups."""

    class Group:
        def rank(self):
            return 0

        def size(self):
            return 1

    encoder = DefaultTaskEncoder()
    dm = energon_plugins.EnergonMultiModalDataModule(
        path=str(vqa_dataset.path),
        tokenizer=None,
        seq_length=64,
        task_encoder=encoder,
        validation_task_encoder=encoder,
        micro_batch_size=2,
        num_workers=0,
        num_val_workers=0,
        pin_memory=True,
        shuffle_buffer_size=10,
        max_samples_per_sequence=None,
        packing_buffer_size=None,
        pg_collection=types.SimpleNamespace(dp=Group(), cp=Group(), tp=Group()),
    )
    assert type(next(dm.train_dataloader())).__name__ == "VQASample"
    validation = iter(dm.val_dataloader())
    eval_iters = len(dm.val_dataloader())
    keys = [key for batch in evaluate(validation, eval_iters) for key in batch.__key__]
    assert sorted(keys) == sorted(vqa_dataset.split_keys["val"])


@pytest.mark.slow
def test_two_real_ranks_with_equal_splits_pass_own_batches_and_unequal_ones_all_refuse(
    tmp_path,
):
    from energon_plugins.synthetic import write_dataset

    dataset = write_dataset(tmp_path / "vqa", kind="vqa", num_samples=60, samples_per_shard=5)
    out = tmp_path / "out"
    out.mkdir()
    proc = run_worker(WORKER, tmp_path / "rendezvous", dataset.path, out, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-5000:]
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]

    assert results[0]["equal"]["n"] == results[1]["equal"]["n"] == 4
    for result in results:
        runs = result["equal"]["runs"]
        assert runs[0] == runs[1] == runs[2], "every evaluation reads the same batches"
        assert {batch["type"] for batch in runs[0]} == {"VQASample"}
        assert all(batch["reduced"] == 2.0 for batch in runs[0]), "both ranks reduced each batch"
    keys = [[k for batch in r["equal"]["runs"][0] for k in batch["keys"]] for r in results]
    assert not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == sorted(dataset.split_keys["val"])

    assert sorted(r["local_unequal"] for r in results) == [7, 8], "the set-up really is uneven"
    for result in results:  # both ranks refuse at their first batch: none waits on the other
        error = result["unequal"]
        assert error is not None and error["type"] == "ConfigError"
        assert "DefaultTaskEncoder" in error["message"] and "VQASample" in error["message"]
        assert "only 7 real batch(es)" in error["message"]


# ------------------------------------------------------------------ a for loop never ends
def test_a_plain_for_loop_warns_once_past_two_evaluations(vqa_dataset):
    loader = own_datamodule(vqa_dataset).val_dataloader()
    assert "one_pass()" in repr(loader) and "one_pass" in type(loader).__doc__
    read = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in loader:
            read += 1
            if read == 2 * len(loader):
                assert not caught, "two whole evaluations are fine"
            if read == 5 * len(loader):
                break
    endless = [w for w in caught if issubclass(w.category, EndlessValidationWarning)]
    assert len(endless) == 1, [str(w.message) for w in caught]
    assert endless[0].filename == __file__, "the warning points at the for loop"
    assert "one_pass()" in str(endless[0].message)


def test_megatron_bridges_evaluations_and_one_pass_loops_never_warn(vqa_dataset):
    loader = own_datamodule(vqa_dataset).val_dataloader()
    with warnings.catch_warnings():
        warnings.simplefilter("error", EndlessValidationWarning)
        validation = iter(loader)  # Bridge: one iterator, next() eval_iters times, many times
        for _ in range(5):
            assert len(evaluate(validation, len(loader))) == len(loader)
        for _ in range(3):
            assert len([batch for batch in loader.one_pass()]) == len(loader)
