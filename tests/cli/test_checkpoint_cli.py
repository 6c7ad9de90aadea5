"""``energon-plugins checkpoint info`` and ``checkpoint redistribute`` (issue 28) on real loader
states: four simulated DP ranks (``tests/loading/_rank_runs.py``) save after two batches each,
as ``save_checkpoint`` writes them and as Megatron-Bridge lays them out. The files redistributed
for two ranks, each loaded as that rank's own, read exactly what the list of the four states
restores.
"""

import json
import shutil

import pytest
from click.testing import CliRunner

from energon_plugins.cli import cli
from energon_plugins.loading.rank_files import read_rank_states
from tests._refusals import assert_refusal, unchanged
from tests.loading._rank_runs import (
    BATCHES_BEFORE,
    ITERATION,
    builder,
    read_run,
    save_run,
    write_bridge_checkpoint,
)

ITER = f"iter_{ITERATION:07d}"
RANK = "train_dataloader_dprank{:03d}.pt".format
USAGE = 2
"""Click's exit code for arguments click itself checks."""
REFUSED = 1
"""The exit code of an input the verb refuses (``Error:`` and the reason, no traceback)."""


@pytest.fixture(scope="module")
def make(vqa_dataset, tokenizer):
    return builder(vqa_dataset.path, tokenizer)


@pytest.fixture(scope="module")
def saved(make, tmp_path_factory):
    """``(folder of 4 rank files, the 4 states as save_state() returned them)``."""
    folder = tmp_path_factory.mktemp("checkpoint-cli") / "ckpt"
    return folder, save_run(make, folder, 4)


@pytest.fixture(scope="module")
def bridge_root(saved, tmp_path_factory):
    """A Megatron-Bridge checkpoint root holding the 4 states as Bridge writes them."""
    root = tmp_path_factory.mktemp("checkpoint-cli-bridge") / "checkpoints"
    write_bridge_checkpoint(root, saved[1])
    return root


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(arg) for arg in args], env={"COLUMNS": "160"})


def test_info_shows_the_layout_and_every_rank(saved):
    folder, states = saved
    result = invoke("checkpoint", "info", folder)
    assert result.exit_code == 0, result.output
    text = result.stdout
    for expected in (
        "4 DP ranks x 0 workers",
        "P = 4, V = 0",
        states[0]["fingerprint"]["dataset"],
        "seed          0",
        "state format  2",
        "complete and consistent",
    ):
        assert expected in text, (expected, text)
    for rank in range(4):
        assert RANK(rank) in text and f"p{rank}: {BATCHES_BEFORE}" in text


def test_info_as_json(saved, bridge_root):
    folder, states = saved
    ours = json.loads(invoke("checkpoint", "info", folder, "--json").stdout)
    assert {k: ours[k] for k in ("ranks", "dp_size", "workers", "partitions", "partitioned", "seed")} == {
        "ranks": 4,
        "dp_size": 4,
        "workers": 0,
        "partitions": 4,
        "partitioned": False,
        "seed": 0,
    }
    assert (ours["dataset"], ours["format"], ours["complete"], ours["problem"]) == (
        states[0]["fingerprint"]["dataset"],
        2,
        True,
        None,
    )
    assert [(r["file"], r["partitions"], r["consumed"]) for r in ours["rank_files"]] == [
        (RANK(r), [r], {str(r): BATCHES_BEFORE}) for r in range(4)
    ]
    bridge = json.loads(invoke("checkpoint", "info", bridge_root, "--json").stdout)
    assert (bridge["origin"], bridge["iteration"], bridge["format"]) == ("megatron-bridge", ITERATION, None)
    assert bridge["folder"] == str(bridge_root / "energon" / ITER)
    assert bridge["rank_files"] == [{**row, "format": None} for row in ours["rank_files"]]


def test_info_on_a_megatron_bridge_root(bridge_root):
    result = invoke("checkpoint", "info", bridge_root)
    assert result.exit_code == 0, result.output
    assert f"Megatron-Bridge, iteration {ITERATION}" in result.stdout
    assert "Megatron-Bridge's (no format number)" in result.stdout
    assert "complete and consistent" in result.stdout


def test_redistributed_files_load_as_each_ranks_own_and_read_what_the_list_restore_reads(
    make, saved, tmp_path
):
    folder, states = saved
    destination = tmp_path / "two-ranks"
    with unchanged(folder):
        result = invoke("checkpoint", "redistribute", folder, destination, "--dp", 2)
    assert result.exit_code == 0, result.output
    assert "wrote 2 rank files" in result.stdout
    assert sorted(p.name for p in destination.iterdir()) == [RANK(0), RANK(1)]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging folder left"
    reference = read_run(make, 2, lambda dm: dm.train_dataloader().restore_state(states))
    assert read_run(make, 2, lambda dm: dm.load_checkpoint(destination)) == reference
    info = json.loads(invoke("checkpoint", "info", destination, "--json").stdout)
    assert (info["dp_size"], info["partitions"], info["partitioned"], info["complete"]) == (2, 4, True, True)
    assert [(r["partitions"], r["consumed"]) for r in info["rank_files"]] == [
        ([0, 2], {"0": BATCHES_BEFORE, "2": BATCHES_BEFORE}),
        ([1, 3], {"1": BATCHES_BEFORE, "3": BATCHES_BEFORE}),
    ]


def test_a_redistributed_bridge_checkpoint_keeps_its_iteration_folder(saved, bridge_root, tmp_path):
    destination = tmp_path / "loader-states"
    result = invoke("checkpoint", "redistribute", bridge_root, destination, "--dp", 2, "--workers", 1)
    assert result.exit_code == 0, result.output
    read = read_rank_states(destination)
    assert read.location.folder == destination / ITER
    assert [(f["dp_rank"], f["dp_world_size"], f["num_workers"]) for f in read.fingerprints] == [
        (0, 2, 1),
        (1, 2, 1),
    ]
    assert all(f["dataset"] == saved[1][0]["fingerprint"]["dataset"] for f in read.fingerprints)
    assert [state["layout"]["partitions"] for state in read.states] == [4, 4]


@pytest.mark.slow
def test_redistributed_for_workers_reads_what_the_list_restore_reads(make, saved, tmp_path):
    folder, states = saved
    destination = tmp_path / "two-by-two"
    assert invoke("checkpoint", "redistribute", folder, destination, "--dp", 2, "--workers", 2).exit_code == 0
    reference = read_run(make, 2, lambda dm: dm.train_dataloader().restore_state(states), workers=2)
    assert read_run(make, 2, lambda dm: dm.load_checkpoint(destination), workers=2) == reference


# ----------------------------------------------------------------------------- refusals
def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _fill(folder):
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me\n", encoding="utf-8")


CASES = [
    # (id, arguments with {src} / {dst}, damage to src, to dst, exit code, what the message names)
    (
        "missing-rank",
        ["redistribute", "{src}", "{dst}", "--dp", "2"],
        lambda s: (s / RANK(2)).unlink(),
        None,
        REFUSED,
        [RANK(2), "is missing"],
    ),
    (
        "non-empty-destination",
        ["redistribute", "{src}", "{dst}", "--dp", "2"],
        None,
        _fill,
        REFUSED,
        ["dst", "is not empty"],
    ),
    (
        "too-many-workers",
        ["redistribute", "{src}", "{dst}", "--dp", "3", "--workers", "2"],
        None,
        None,
        REFUSED,
        ["--dp 3", "--workers 2", "4 data partitions", "= 6"],
    ),
    (
        "corrupt-file",
        ["redistribute", "{src}", "{dst}", "--dp", "2"],
        lambda s: _truncate(s / RANK(1)),
        None,
        REFUSED,
        [RANK(1), "truncated"],
    ),
    (
        "no-state-files",
        ["redistribute", "{src}", "{dst}", "--dp", "2"],
        lambda s: [p.unlink() for p in s.glob("*.pt")],
        None,
        REFUSED,
        ["no loader state files", "src"],
    ),
    ("dp-zero", ["redistribute", "{src}", "{dst}", "--dp", "0"], None, None, USAGE, ["--dp", "0"]),
    ("dp-missing", ["redistribute", "{src}", "{dst}"], None, None, USAGE, ["--dp"]),
    (
        "destination-a-file",
        ["redistribute", "{src}", "{dst}", "--dp", "2"],
        None,
        lambda d: d.write_text("x"),
        USAGE,
        ["dst", "file"],
    ),
    (
        "info-missing-rank",
        ["info", "{src}"],
        lambda s: (s / RANK(2)).unlink(),
        None,
        REFUSED,
        [RANK(2), "is missing"],
    ),
    (
        "info-corrupt-file",
        ["info", "{src}"],
        lambda s: _truncate(s / RANK(1)),
        None,
        REFUSED,
        [RANK(1), "truncated"],
    ),
    (
        "info-no-state-files",
        ["info", "{src}"],
        lambda s: [p.unlink() for p in s.glob("*.pt")],
        None,
        REFUSED,
        ["no loader state files"],
    ),
    ("info-absent-folder", ["info", "{dst}"], None, None, USAGE, ["dst", "does not exist"]),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("arguments", "damage_src", "damage_dst", "code", "named"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_a_bad_checkpoint_argument_is_refused_by_name(
    saved, tmp_path, arguments, damage_src, damage_dst, code, named
):
    src, dst = tmp_path / "src", tmp_path / "dst"
    shutil.copytree(saved[0], src)
    for damage, path in ((damage_src, src), (damage_dst, dst)):
        if damage is not None:
            damage(path)
    with unchanged(tmp_path):
        result = invoke("checkpoint", *(a.format(src=src, dst=dst) for a in arguments))
    assert result.exit_code == code, result.output
    message = result.stderr if code == REFUSED else result.output
    assert_refusal(message, *named, one_paragraph=code == REFUSED)
    if code == REFUSED:
        assert message.startswith("Error: ")
