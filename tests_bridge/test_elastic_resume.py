"""A Megatron-Bridge run that restarts on another layout continues its data exactly (issue 28).

Bridge 0.6.2's own ``checkpointing.maybe_save_dataloader_state`` writes one file per DP rank
(``DIR/iter_NNNNNNN/train_dataloader_dprank{NNN}.pt``) and ``maybe_load_dataloader_state``
restores each rank from *its own* file only. The test world is one process (DP 1), so the
layout changes through ``num_workers`` (2 -> 1), which takes the same path as a change of node
count: a run of 2 workers (two data partitions) saves at iteration 3; a run of 1 worker then,
through what Bridge's ``setup()`` runs on a resume (:func:`setup_restore`),

- loads those files as they are: refused, naming ``num_workers`` and the way on;
- loads the files ``energon-plugins checkpoint redistribute`` (the real CLI, in a process of its
  own) rewrote for 1 worker into a new folder, given to Bridge as ``dataset.dataloader_load``;
- or restores the 2-worker files itself (``load_checkpoint`` in its dataset slot, Bridge's own
  restore turned off with ``dataset.dataloader_load=""``).

Either way its batches continue the uninterrupted run's, partition by partition, key for key and
tensor for tensor. The one worker takes partition 0, then 1, in turn from partition 0, while the
2-worker loader's round robin stood at worker 1 after 3 batches: the batches are compared per
data partition.
"""

import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from megatron.bridge.training import checkpointing, vlm_step

from energon_plugins import EnergonMultiModalDataModule
from energon_plugins.loading.checkpoint import StateMismatchError
from tests_bridge.bridge_run import (
    EnergonPluginsDataset,
    RecordingIterator,
    TinyVLM,
    bridge_config,
    data_iterators,
    global_state,
)
from tests_bridge.test_training_loop import PACKING, bridge_run

SAVED_AT = 3  # the iteration of the checkpoint: batches read before the save
AFTER = 3  # batches compared per data partition after the save
OLD_WORKERS = 2


@dataclasses.dataclass(kw_only=True)
class SelfRestoringDataset(EnergonPluginsDataset):
    """The dataset slot of the docs' second way: it restores the loader states itself."""

    loader_states: str
    """A Bridge checkpoint root, its ``energon`` folder or an iteration's folder."""

    def build_datasets(self, context):
        """Our loaders, the training loader restored from ``loader_states`` (any layout)."""
        datamodule = EnergonMultiModalDataModule.from_config(
            self.config_file, pg_collection=context.pg_collection
        )
        datamodule.load_checkpoint(self.loader_states)
        return datamodule.train_dataloader(), iter(datamodule.val_dataloader()), None


def self_restoring_run(run_config, pg_collection, loader_states, **keys):
    """A Bridge run whose dataset slot is :class:`SelfRestoringDataset`, Bridge's restore off."""
    config = bridge_config(run_config(**keys), eval_iters=3)
    fields = {f.name: getattr(config.dataset, f.name) for f in dataclasses.fields(config.dataset) if f.init}
    fields["dataloader_load"] = ""  # turns Bridge's own restore off
    config.dataset = SelfRestoringDataset(**fields, loader_states=str(loader_states))
    state = global_state(config)
    train, _, _ = data_iterators(state, pg_collection)
    return state, train, TinyVLM(config.model, pg_collection)


def setup_restore(state, train, pg_collection, loaded_root) -> None:
    """What Bridge's ``setup()`` runs after building the iterators, on a resume from the model
    checkpoint ``loaded_root`` at iteration ``SAVED_AT`` (``training/setup.py``)."""
    state.train_state.step = SAVED_AT  # restored by the model checkpoint's load
    load = getattr(state.cfg.dataset, "dataloader_load", None)
    if load is None:  # load_checkpoint records the loaded checkpoint's energon/ folder
        load = os.path.join(loaded_root, checkpointing.DATALOADER_STATE_SUBDIR)
    checkpointing.maybe_load_dataloader_state(
        train, state.train_state.step, load, pg_collection=pg_collection
    )


def by_partition(batches, first: int, partitions: int = OLD_WORKERS) -> dict[int, list]:
    """``batches`` (taken from the partitions in turn, starting at ``first``) per partition."""
    split: dict[int, list] = {p: [] for p in range(partitions)}
    for index, batch in enumerate(batches):
        split[(first + index) % partitions].append(batch)
    return split


def sample_keys(batches) -> set[str]:
    """The sample keys of ``batches`` (a packed row joins its samples' keys with commas)."""
    return {key for batch in batches for row in batch["__keys__"] for key in str(row).split(",") if key}


def assert_continues(expected: dict[int, list], state, train, model) -> None:
    """``2 x AFTER`` forward steps of the 1-worker run read, per partition, the batches of
    ``expected``: the same samples, every tensor (and the images) equal."""
    recorder = RecordingIterator(train)
    try:
        for _ in range(OLD_WORKERS * AFTER):
            vlm_step.forward_step(state, recorder, model)
    finally:
        train.iterable.close()
    got = by_partition(recorder.batches, first=0)  # one worker: partition 0, then 1, from 0
    for partition, batches in expected.items():
        assert len(got[partition]) == len(batches) == AFTER
        for got_batch, want in zip(got[partition], batches, strict=True):
            assert list(got_batch["__keys__"]) == list(want["__keys__"]), partition
            tensors = sorted(name for name, value in want.items() if isinstance(value, torch.Tensor))
            assert {"tokens", "labels", "loss_mask", "position_ids"} <= set(tensors)
            for name in tensors:
                assert torch.equal(got_batch[name], want[name]), name
            pixels = got_batch["visual_inputs"].pixel_values
            assert torch.equal(pixels, want["visual_inputs"].pixel_values)


def saved_two_worker_run(run_config, pg_collection, root, keys):
    """A 2-worker Bridge run: ``SAVED_AT`` forward steps, then what Bridge's ``save_checkpoint``
    writes of the data into the checkpoint ``root``: the loader states and the tracker; returns
    the batches an uninterrupted run reads next, per data partition."""
    state, train, _, _, model = bridge_run(run_config, pg_collection, num_workers=OLD_WORKERS, **keys)
    try:
        for _ in range(SAVED_AT):
            vlm_step.forward_step(state, train, model)
        energon = os.path.join(root, checkpointing.DATALOADER_STATE_SUBDIR)  # save_checkpoint's
        checkpointing.maybe_save_dataloader_state(
            [model], train, SAVED_AT, energon, pg_collection=pg_collection
        )
        state.train_state.step = SAVED_AT  # and its tracker, which names the iteration
        tracker = checkpointing.get_checkpoint_train_state_filename(
            str(root), prefix=checkpointing.TRACKER_PREFIX
        )
        torch.save(state.train_state.state_dict(), tracker)
        continuation = [next(train) for _ in range(OLD_WORKERS * AFTER)]
    finally:
        train.iterable.close()
    # Energon's round robin: batch i comes from worker i % 2, and SAVED_AT batches were read
    expected = by_partition(continuation, first=SAVED_AT % OLD_WORKERS)
    first, second = (sample_keys(expected[p]) for p in range(OLD_WORKERS))
    assert first and second and not first & second, "the partitions read different samples"
    return expected


@pytest.mark.parametrize("keys", [{}, PACKING], ids=["plain", "packed-carry-over"])
def test_bridge_resumes_two_worker_files_on_one_worker_exactly(run_config, pg_collection, tmp_path, keys):
    root = tmp_path / "checkpoints"  # checkpoint.save; Bridge's loader states go to root/energon
    energon = root / checkpointing.DATALOADER_STATE_SUBDIR
    expected = saved_two_worker_run(run_config, pg_collection, root, keys)
    iteration_dir = energon / f"iter_{SAVED_AT:07d}"
    assert [path.name for path in iteration_dir.iterdir()] == ["train_dataloader_dprank000.pt"]

    # the files as the 2-worker run left them, by Bridge's own restore: refused
    state, refused, _, _, _ = bridge_run(run_config, pg_collection, num_workers=1, **keys)
    with pytest.raises(StateMismatchError) as refusal:
        setup_restore(state, refused, pg_collection, root)
    refused.iterable.close()
    message = str(refusal.value)
    assert "num_workers: saved 2, now 1" in message
    assert "list of every old rank's save_state()" in message and "load_checkpoint(DIR)" in message

    # the files redistributed for 1 worker, by Bridge's own restore from dataset.dataloader_load
    new_dir = tmp_path / "dataloader-1-worker"
    command = [sys.executable, "-m", "energon_plugins", "checkpoint", "redistribute"]
    command += [str(root), str(new_dir), "--dp", "1", "--workers", "1"]  # the tracker's iteration
    wide = {**os.environ, "COLUMNS": "1000"}  # rich wraps long paths at the terminal's width
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=wide)
    assert done.returncode == 0, done.stderr
    assert f"dataset.dataloader_load={new_dir}" in done.stdout  # the next step it prints
    assert (new_dir / iteration_dir.name / "train_dataloader_dprank000.pt").is_file()
    assert (iteration_dir / "train_dataloader_dprank000.pt").is_file()  # the source is kept
    state, resumed, _, _, model = bridge_run(run_config, pg_collection, num_workers=1, **keys)
    state.cfg.dataset.dataloader_load = str(new_dir)
    setup_restore(state, resumed, pg_collection, root)
    assert_continues(expected, state, resumed, model)

    # the 2-worker files restored by the dataset slot itself, Bridge's restore off
    state, resumed, model = self_restoring_run(run_config, pg_collection, root, num_workers=1, **keys)
    setup_restore(state, resumed, pg_collection, root)
    assert_continues(expected, state, resumed, model)
