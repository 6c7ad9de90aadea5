"""A stopped or dead data-parallel rank fails the others quickly, naming it (issue 27).

The data side agrees on the validation length over a gloo group of its own with its own
timeout (``ENERGON_PLUGINS_DATA_TIMEOUT``), not over the training group (whose timeout is 30
minutes by default). The multi-process tests run four real ranks (gloo, file rendezvous, a
five-minute training-group timeout) through ``stopped_rank_worker.py``: one rank SIGSTOPs
itself, or dies, before the agreement; the others must raise ``RankTimeoutError`` naming it.
The elapsed-time bounds catch a hang; they are not performance assertions.
"""

import json
from pathlib import Path

import pytest

from energon_plugins.environment import unknown_variables
from energon_plugins.errors import ConfigError, EnergonPluginsError
from energon_plugins.loading.distributed import (
    DATA_TIMEOUT_VARIABLE,
    DEFAULT_DATA_TIMEOUT,
    DataGroup,
    ParallelLayout,
    RankTimeoutError,
    data_timeout,
)
from tests._ranks import run_worker

WORKER = Path(__file__).with_name("stopped_rank_worker.py")
WORLD = 4
STOPPED = 2
DATA_TIMEOUT = 5.0  # what the worker sets for the stopped rank
MARGIN = 30.0  # seconds beyond the timeout allowed to a loaded 2-core machine; a hang takes minutes


def run(mode: str, tmp_path: Path, dataset) -> tuple[list[dict], dict | None]:
    """Run the worker in ``mode``; every rank's result (``None`` where a rank wrote none) and
    the launcher's record."""
    out = tmp_path / "out"
    out.mkdir()
    proc = run_worker(WORKER, mode, tmp_path / "rendezvous", dataset.path, out, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-5000:]
    results = [
        json.loads(path.read_text()) if (path := out / f"rank{rank}.json").exists() else None
        for rank in range(WORLD)
    ]
    launcher = out / "launcher.json"
    return results, json.loads(launcher.read_text()) if launcher.exists() else None


# ------------------------------------------------------------------ real ranks
@pytest.mark.slow
def test_a_stopped_rank_fails_the_others_within_the_data_timeout_naming_it(tmp_path, vqa_dataset):
    results, launcher = run("stopped", tmp_path, vqa_dataset)
    assert launcher["stopped_still_there"], "the stopped rank was stopped, not crashed"
    assert launcher["survivors_done"], "the other ranks finished while it was stopped"
    assert launcher["codes"] == [0, 0, -9, 0], "the launcher SIGKILLed the stopped rank"
    assert results[STOPPED] is None
    for rank, result in enumerate(results):
        if rank == STOPPED:
            continue
        assert result["error"] == "RankTimeoutError", result
        assert result["ranks"] == [STOPPED]
        message = result["message"]
        assert message.startswith("len(val_dataloader()): rank 2 (data-parallel rank 2 of 4) did not answer")
        assert "the data side waits 5 s, ENERGON_PLUGINS_DATA_TIMEOUT" in message
        assert DATA_TIMEOUT * 0.9 <= result["seconds"] < DATA_TIMEOUT + MARGIN, result["seconds"]


@pytest.mark.slow
def test_a_dead_rank_is_named_at_once_not_after_the_timeout(tmp_path, vqa_dataset):
    results, launcher = run("killed", tmp_path, vqa_dataset)
    assert launcher["codes"] == [0, 0, 3, 0]
    assert all(result["first"] == WORLD - 1 for result in results if result is not None)
    for rank, result in enumerate(results):
        if rank == STOPPED:
            continue
        assert result["ranks"] == [STOPPED], result
        assert "second agreement: rank 2 (data-parallel rank 2 of 4) did not answer" in result["message"]
        assert "Connection" in result["message"], "gloo's reason: closed or reset by the peer"
        assert result["seconds"] < DEFAULT_DATA_TIMEOUT / 2, "named from the closed connection"


@pytest.mark.slow
def test_with_every_rank_alive_the_lengths_are_what_an_all_reduce_gives(tmp_path, vqa_dataset):
    results, _ = run("alive", tmp_path, vqa_dataset)
    for layout, groups in (("dp2cp2", [[0, 2], [1, 3]]), ("dp4", [[0, 1, 2, 3]])):
        for group in groups:
            locals_ = [results[rank][layout]["local"] for rank in group]
            assert len(set(locals_)) > 1, "the DP ranks' parts differ: the agreement matters"
            for rank in group:
                assert results[rank][layout]["length"] == max(locals_)
                assert results[rank][layout]["length"] == results[rank][layout]["all_reduce"]


# ------------------------------------------------------------------ one process
def test_a_single_rank_or_stand_ins_create_no_group():
    single = DataGroup(ParallelLayout())
    assert single.ranks == [] and single.max_of(7, "n") == 7
    stand_ins = DataGroup(ParallelLayout(dp_rank=1, dp_size=2))
    with pytest.raises(ConfigError, match=r"^n: the data-parallel group has 2 ranks but torch.distributed"):
        stand_ins.max_of(7, "n")


def test_the_timeout_variable_is_known_and_read():
    assert unknown_variables({DATA_TIMEOUT_VARIABLE: "5"}) == []
    assert data_timeout({}) == DEFAULT_DATA_TIMEOUT == 120.0
    assert data_timeout({DATA_TIMEOUT_VARIABLE: " 2.5 "}) == 2.5
    assert data_timeout({DATA_TIMEOUT_VARIABLE: ""}) == DEFAULT_DATA_TIMEOUT
    assert issubclass(RankTimeoutError, EnergonPluginsError) and issubclass(RankTimeoutError, TimeoutError)


@pytest.mark.bad_input
@pytest.mark.parametrize("value", ["abc", "0", "-5", "inf", "nan", "1e400", "60s"])
def test_a_bad_timeout_value_is_refused_naming_the_variable(value):
    with pytest.raises(ConfigError) as info:
        data_timeout({DATA_TIMEOUT_VARIABLE: value})
    message = str(info.value)
    assert message.startswith(f"environment variable {DATA_TIMEOUT_VARIABLE}: expected a number of seconds")
    assert repr(value) in message
