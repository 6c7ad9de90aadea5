"""A checkpoint folder of every rank's loader state (issue 28): found as save_checkpoint or
Megatron-Bridge lays it out, read whole and checked, and restored by ``load_checkpoint`` on
another number of ranks exactly as the list of states restores.

Four simulated DP ranks (``tests/loading/_rank_runs.py``) save after two batches each; two
ranks then continue. The in-process layout tests of the list restore itself are in
``test_elastic_restore.py``.
"""

import shutil

import pytest

from energon_plugins.loading.checkpoint import (
    StateFileError,
    StateMismatchError,
    read_state_file,
    save_loader_state,
)
from energon_plugins.loading.rank_files import find_rank_files, read_rank_states
from tests._refusals import assert_refusal, unchanged
from tests.loading._rank_runs import (
    ITERATION,
    builder,
    keys,
    read_run,
    save_run,
    write_bridge_checkpoint,
)

ITER = f"iter_{ITERATION:07d}"


@pytest.fixture(scope="module")
def make(vqa_dataset, tokenizer):
    return builder(vqa_dataset.path, tokenizer)


@pytest.fixture(scope="module")
def saved(make, tmp_path_factory):
    """``(folder of 4 rank files, the 4 states as save_state() returned them)``."""
    folder = tmp_path_factory.mktemp("four-ranks") / "ckpt"
    return folder, save_run(make, folder, 4)


@pytest.fixture(scope="module")
def reference(make, saved):
    """What 2 ranks read after restoring the list of the 4 states."""
    return read_run(make, 2, lambda dm: dm.train_dataloader().restore_state(saved[1]))


def test_load_checkpoint_on_fewer_ranks_reads_what_the_list_restore_reads(make, saved, reference):
    folder, _ = saved
    with unchanged(folder):
        got = read_run(make, 2, lambda dm: dm.load_checkpoint(folder))
    assert got == reference
    assert not set(got[0]) & set(got[1]), "the two ranks read disjoint samples"


@pytest.mark.parametrize(
    ("tracker", "subdir", "given", "origin"),
    [
        ("txt", "energon", "root", "megatron-bridge"),
        ("pt", "energon", "root", "megatron-bridge"),
        ("txt", "", "root", "megatron-bridge"),
        ("txt", "energon", "model-iteration", "megatron-bridge"),
        ("txt", "energon", "loader-root", "megatron-bridge"),
        ("txt", "energon", "states", "folder"),
    ],
    ids=[
        "tracker-txt",
        "tracker-train-state",
        "states-in-root",
        "model-iter-folder",
        "energon-folder",
        "iter-folder",
    ],
)
def test_a_megatron_bridge_checkpoint_is_found_and_read(saved, tmp_path, tracker, subdir, given, origin):
    _, states = saved
    root = tmp_path / "bridge"
    states_folder = write_bridge_checkpoint(root, states, tracker=tracker, subdir=subdir)
    argument = {
        "root": root,
        "model-iteration": root / ITER,
        "loader-root": root / "energon",
        "states": states_folder,
    }[given]
    location = find_rank_files(argument)
    assert (location.folder, location.origin, location.subfolder) == (states_folder, origin, ITER)
    read = read_rank_states(argument)
    assert read.paths == [states_folder / f"train_dataloader_dprank{r:03d}.pt" for r in range(4)]
    assert read.formats == [None] * 4, "Bridge writes no format number"
    assert read.fingerprints == [state["fingerprint"] for state in states]


def test_load_checkpoint_from_a_megatron_bridge_root(make, saved, reference, tmp_path):
    root = tmp_path / "bridge"
    write_bridge_checkpoint(root, saved[1])
    assert read_run(make, 2, lambda dm: dm.load_checkpoint(root)) == reference


def test_a_state_saved_after_the_restore_reloads_at_the_same_size(make, saved, tmp_path):
    """Two ranks continue the four-rank folder, read a batch and save into a copy of it (a
    partitioned state of their own size; the files of old ranks 2 and 3 stay behind, unread);
    fresh datamodules loading that copy read what the first ones read next."""
    again = tmp_path / "again"
    shutil.copytree(saved[0], again)
    expected, got = [], []
    for rank in range(2):
        datamodule = make(rank, 2)
        datamodule.load_checkpoint(saved[0])
        loader = datamodule.train_dataloader()
        next(loader)
        datamodule.save_checkpoint(again)
        expected.append([key for _ in range(2) for key in keys(next(loader))])
        loader.close()
    for rank in range(2):
        datamodule = make(rank, 2)
        datamodule.load_checkpoint(again)
        loader = datamodule.train_dataloader()
        got.append([key for _ in range(2) for key in keys(next(loader))])
        loader.close()
    assert got == expected


def test_a_rank_of_the_saved_size_reads_only_its_own_file(make, saved, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(saved[0], folder)
    last = folder / "train_dataloader_dprank003.pt"
    last.write_bytes(last.read_bytes()[:100])  # rank 0 of 4 never opens it
    first = []
    for source in (saved[0], folder):
        datamodule = make(0, 4)
        datamodule.load_checkpoint(source)
        loader = datamodule.train_dataloader()
        first.append(keys(next(loader)))
        loader.close()
    assert first[0] == first[1]


# ----------------------------------------------------------------------------- refusals
def _rewrite_with(path, **changes):
    """Rewrite ``path`` as save_checkpoint would have with other fingerprint values."""
    state, fingerprint = read_state_file(path)
    fingerprint = {**fingerprint, **changes}
    state = {**state, "fingerprint": fingerprint}
    rank = int(path.stem[-3:])
    save_loader_state(path.parent, state, dp_rank=rank, fingerprint=fingerprint)


def _into_iterations(folder):
    """The files moved into two Bridge iteration folders, no tracker naming either."""
    for name in ("iter_0000100", "iter_0000200"):
        (folder / name).mkdir()
        for path in folder.glob("*.pt"):
            shutil.copy(path, folder / name / path.name)
    for path in folder.glob("*.pt"):
        path.unlink()


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _not_a_loader_state(path):
    import torch

    torch.save({"dataloader_state_dict": {"step": 3}}, path)


def _only_tracker(folder, text):
    for path in folder.glob("*.pt"):
        path.unlink()
    (folder / "latest_checkpointed_iteration.txt").write_text(text, encoding="utf-8")


RANK = "train_dataloader_dprank{:03d}.pt".format
FOLDER_ROWS = [
    ("a-rank-missing", lambda f: (f / RANK(2)).unlink(), StateMismatchError, [RANK(2), "is missing"]),
    ("the-last-rank-missing", lambda f: (f / RANK(3)).unlink(), StateMismatchError, [RANK(3), "4 DP ranks"]),
    (
        "a-rank-twice",
        lambda f: shutil.copy(f / RANK(0), f / RANK(1)),
        StateMismatchError,
        [RANK(1), "holds DP rank 0's state"],
    ),
    (
        "files-of-another-run",
        lambda f: _rewrite_with(f / RANK(2), shuffle_buffer_size=11),
        StateMismatchError,
        [RANK(2), "different runs", "shuffle_buffer_size: saved 10, now 11"],
    ),
    ("a-corrupt-file", lambda f: _truncate(f / RANK(1)), StateFileError, [RANK(1), "truncated"]),
    (
        "not-a-loader-state",
        lambda f: _not_a_loader_state(f / RANK(1)),
        StateFileError,
        [RANK(1), "no loader state"],
    ),
    (
        "a-misnamed-file",
        lambda f: shutil.copy(f / RANK(1), f / "train_dataloader_dprank1.pt"),
        StateMismatchError,
        ["train_dataloader_dprank1.pt", RANK(1)],
    ),
    (
        "a-file-named-like-one",
        lambda f: shutil.copy(f / RANK(1), f / "train_dataloader_dprank_old.pt"),
        StateMismatchError,
        ["train_dataloader_dprank_old.pt", "named like a loader state file"],
    ),
    (
        "no-state-files",
        lambda f: [p.unlink() for p in f.glob("*.pt")],
        StateFileError,
        ["no loader state files"],
    ),
    (
        "tracker-of-a-missing-iteration",
        lambda f: _only_tracker(f, "200\n"),
        StateFileError,
        ["latest_checkpointed_iteration.txt", "iteration 200", "iter_0000200"],
    ),
    (
        "tracker-without-iteration",
        lambda f: _only_tracker(f, "latest\n"),
        StateFileError,
        ["latest_checkpointed_iteration.txt", "names no iteration"],
    ),
    ("two-iterations-no-tracker", _into_iterations, StateFileError, ["2 iterations", "iter_0000200"]),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("damage", "error", "named"), [r[1:] for r in FOLDER_ROWS], ids=[r[0] for r in FOLDER_ROWS]
)
def test_a_folder_that_is_not_one_complete_set_is_refused_by_name(saved, tmp_path, damage, error, named):
    folder = tmp_path / "ckpt"
    shutil.copytree(saved[0], folder)
    damage(folder)
    with unchanged(folder), pytest.raises(error) as info:
        read_rank_states(folder)
    assert_refusal(str(info.value), *named)


LOAD_ROWS = [
    # (ranks, rank, workers, extra settings, damage, what the message names)
    ("a-rank-missing", 2, 0, 0, {}, lambda f: (f / RANK(2)).unlink(), [RANK(2), "is missing"]),
    (
        "another-setup",
        2,
        0,
        0,
        {"shuffle_buffer_size": 11},
        None,
        [RANK(0), "shuffle_buffer_size: saved 10, now 11", "dp_world_size: saved 4, now 2"],
    ),
    ("too-many-workers", 3, 0, 2, {}, None, ["ckpt", "3 ranks x 2 workers", "dp_world_size: saved 4, now 3"]),
    (
        "a-rank-beyond",
        5,
        4,
        0,
        {},
        None,
        ["no loader state for DP rank 4", RANK(3), "dp_world_size: saved 4, now 5"],
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("ranks", "rank", "workers", "extra", "damage", "named"),
    [r[1:] for r in LOAD_ROWS],
    ids=[r[0] for r in LOAD_ROWS],
)
def test_load_checkpoint_of_another_size_refuses_by_name(
    make, saved, tmp_path, ranks, rank, workers, extra, damage, named
):
    folder = tmp_path / "ckpt"
    shutil.copytree(saved[0], folder)
    if damage is not None:
        damage(folder)
    datamodule = make(rank, ranks, workers, **extra)
    with unchanged(folder), pytest.raises((StateMismatchError, StateFileError)) as info:
        datamodule.load_checkpoint(folder)
    assert_refusal(str(info.value), *named)
    assert not datamodule.train_dataloader().started, "nothing was iterated"


@pytest.mark.bad_input
def test_a_redistributed_file_with_a_broken_layout_is_named(make, saved, tmp_path):
    from energon_plugins.loading.redistribute import redistribute

    folder = tmp_path / "two-ranks"
    redistribute(saved[0], folder, 2)
    path = folder / RANK(0)
    state, fingerprint = read_state_file(path)
    broken = {**state, "layout": {**state["layout"], "partitions": "four"}}
    save_loader_state(folder, broken, dp_rank=0, fingerprint=fingerprint)
    datamodule = make(0, 2)
    with unchanged(folder), pytest.raises(StateFileError) as info:
        datamodule.load_checkpoint(folder)
    assert_refusal(str(info.value), str(path), "state['layout']", "four")
