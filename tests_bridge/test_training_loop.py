"""Megatron-Bridge 0.6.2's own training-loop code on our datamodule (no replay: Bridge's functions).

- data: ``get_dataset_provider`` / ``setup_data_iterators`` over :class:`EnergonPluginsDataset`;
- steps: ``vlm_step.forward_step`` (``get_batch``, ``get_packed_seq_params``, the masked
  next-token loss) feeding :class:`TinyVLM`;
- evaluation: ``eval.evaluate`` twice, the same batches and the same loss each time;
- resume: ``checkpointing.maybe_save_dataloader_state`` / ``maybe_load_dataloader_state``;
- and a tiny model that learns through ``forward_step`` (its validation loss drops).
"""

import math

import pytest
import torch
from megatron.bridge.training import checkpointing, vlm_step
from megatron.bridge.training.eval import evaluate
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.rerun_state_machine import RerunDataIterator

from energon_plugins.loading.dataloader import EnergonDataloader
from tests_bridge.bridge_run import (
    MICRO_BATCH,
    SEQ,
    RecordingIterator,
    TinyVLM,
    bridge_config,
    data_iterators,
    global_state,
)

PACKING = {
    "packing_buffer_size": 6,
    "packing": {"name": "first-fit-decreasing", "options": {"carry_over": True}},
}


def bridge_run(run_config, pg_collection, *, eval_iters=3, train_iters=20, **keys):
    """Bridge's state, its three iterators over our loaders, and a TinyVLM."""
    state = global_state(bridge_config(run_config(**keys), eval_iters=eval_iters, train_iters=train_iters))
    train, valid, test = data_iterators(state, pg_collection)
    return state, train, valid, test, TinyVLM(state.cfg.model, pg_collection)


def run_evaluation(state, valid, model):
    """Bridge's ``evaluate`` with ``vlm_step.forward_step``; the loss and the batch keys it read."""
    recorder = RecordingIterator(valid)
    losses, _, timelimit_hit = evaluate(state, vlm_step.forward_step, recorder, [model], None, state.cfg)
    assert not timelimit_hit
    return losses["lm loss"], [list(batch["__keys__"]) for batch in recorder.batches]


def test_bridges_data_setup_passes_our_loaders_through(run_config, pg_collection, vqa_dataset):
    state, train, valid, test, _ = bridge_run(run_config, pg_collection)
    assert isinstance(train, RerunDataIterator) and isinstance(train.iterable, EnergonDataloader)
    assert isinstance(valid, RerunDataIterator) and test is None
    assert state.train_state.do_train and state.train_state.do_valid
    batch = next(train)
    assert set(batch["__keys__"]) <= set(vqa_dataset.split_keys["train"])
    assert batch["tokens"].shape == (MICRO_BATCH, SEQ)
    assert set(next(valid)["__keys__"]) <= set(vqa_dataset.split_keys["val"])


def test_forward_step_feeds_our_batch_to_the_model_and_the_loss(run_config, pg_collection):
    state, train, _, _, model = bridge_run(run_config, pg_collection)
    recorder = RecordingIterator(train)
    output, loss_function = vlm_step.forward_step(state, recorder, model)
    (batch,), (call,) = recorder.batches, model.calls
    assert torch.equal(call["input_ids"], batch["tokens"])
    assert torch.equal(call["labels"], batch["labels"])
    assert call["attention_mask"] is None  # Bridge skips it by default
    assert torch.equal(call["pixel_values"], batch["visual_inputs"].pixel_values)
    assert call["pixel_values"].shape[1:] == (3, 28, 28)
    # next-token labels: where the loss counts, the label is the following token
    on = batch["loss_mask"][:, :-1].bool()
    assert on.any() and torch.equal(batch["labels"][:, :-1][on], batch["tokens"][:, 1:][on])
    loss, num_tokens, report = loss_function(output)
    assert num_tokens.item() == int(batch["loss_mask"].sum())
    assert torch.allclose(loss, (output * batch["loss_mask"]).sum())
    assert report["lm loss"][1].item() == num_tokens.item()
    assert math.isfinite(loss.item()) and loss.item() > 0


def test_packed_batches_reach_the_model_as_packed_seq_params(run_config, pg_collection):
    state, train, _, _, model = bridge_run(run_config, pg_collection, **PACKING)
    recorder = RecordingIterator(train)
    vlm_step.forward_step(state, recorder, model)
    (batch,), (call,) = recorder.batches, model.calls
    params = call["packed_seq_params"]
    assert isinstance(params, PackedSeqParams) and params.qkv_format == "thd"
    assert torch.equal(params.cu_seqlens_q, batch["cu_seqlens_q"])
    assert params.cu_seqlens_q[-1].item() <= call["input_ids"].numel()
    assert len(params.cu_seqlens_q) > 2, "several samples packed into the stream"
    assert call["input_ids"].shape == (1, MICRO_BATCH * SEQ)
    assert call["attention_mask"] is None


@pytest.mark.parametrize("per_evaluation", [None, 3], ids=["one-pass", "fewer-than-a-pass"])
def test_evaluate_twice_reads_the_same_batches_and_gives_the_same_loss(
    run_config, pg_collection, vqa_dataset, per_evaluation
):
    """Bridge reads ``eval_iters`` batches from one validation iterator at every evaluation."""
    keys = {} if per_evaluation is None else {"val_batches_per_evaluation": per_evaluation}
    one_pass = math.ceil(len(vqa_dataset.split_keys["val"]) / MICRO_BATCH)
    eval_iters = per_evaluation or one_pass
    state, _, valid, _, model = bridge_run(run_config, pg_collection, eval_iters=eval_iters, **keys)
    first_loss, first_keys = run_evaluation(state, valid, model)
    second_loss, second_keys = run_evaluation(state, valid, model)
    assert first_keys == second_keys and len(first_keys) == eval_iters
    assert torch.equal(first_loss, second_loss) and math.isfinite(first_loss.item())
    read = [key for batch in first_keys for key in batch]
    if per_evaluation is None:
        assert sorted(read) == sorted(vqa_dataset.split_keys["val"]), "the whole split, once"
    else:
        assert len(set(read)) == len(read) == per_evaluation * MICRO_BATCH


@pytest.mark.parametrize("keys", [{}, PACKING], ids=["plain", "packed-carry-over"])
def test_bridges_dataloader_checkpoint_resumes_exactly(run_config, pg_collection, tmp_path, keys):
    state, train, _, _, model = bridge_run(run_config, pg_collection, **keys)
    for _ in range(3):
        vlm_step.forward_step(state, train, model)
    save_dir = tmp_path / "checkpoints" / "energon"
    checkpointing.maybe_save_dataloader_state([model], train, 3, str(save_dir), pg_collection=pg_collection)
    assert (save_dir / "iter_0000003" / "train_dataloader_dprank000.pt").is_file()
    expected = [next(train) for _ in range(4)]

    resumed_state, resumed, _, _, _ = bridge_run(run_config, pg_collection, **keys)
    checkpointing.maybe_load_dataloader_state(resumed, 3, str(save_dir), pg_collection=pg_collection)
    for want in expected:
        got = next(resumed)
        assert list(got["__keys__"]) == list(want["__keys__"])
        for name in ("tokens", "labels", "loss_mask", "position_ids"):
            assert torch.equal(got[name], want[name]), name
        assert torch.equal(got["visual_inputs"].pixel_values, want["visual_inputs"].pixel_values)


def test_a_tiny_model_learns_through_bridges_forward_step(run_config, pg_collection):
    state, train, valid, _, model = bridge_run(
        run_config, pg_collection, train_iters=40, val_batches_per_evaluation=3
    )
    before, before_keys = run_evaluation(state, valid, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    for _ in range(state.cfg.train.train_iters):
        output, loss_function = vlm_step.forward_step(state, train, model)
        loss, num_tokens, _ = loss_function(output)
        optimizer.zero_grad()
        (loss / num_tokens).backward()
        optimizer.step()
    after, after_keys = run_evaluation(state, valid, model)
    assert after_keys == before_keys
    assert after < 0.7 * before, (before, after)
