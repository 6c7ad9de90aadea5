"""Resuming on another number of ranks or loader workers, with real processes (issue 28).

Each scenario runs ``elastic_worker.py``: real ``torch.distributed`` ranks over gloo read the
training stream of a real Energon dataset, save every rank's state file and end; ranks of
another layout (new processes, a new process group) restore the list of every old rank's
state and continue. The old ranks go on reading past their save: that uninterrupted run is
the reference. The stream is a fixed set of data partitions: every partition's outputs before the change
followed by its outputs after it must be exactly the reference's (same batches, same order),
so nothing is lost or repeated, also what sat in shuffle buffers, packing buffers and
carry-over at the save. Each partition reads at least the rest of its epoch after the change,
so the epoch in progress is compared whole; one scenario without shuffle buffer and packing
reads exactly one epoch and checks that every training sample appears exactly once over all
ranks, before and after the change.

The in-process tests of the same restore (no process group) are in ``test_elastic_restore.py``.
"""

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests._ranks import run_worker

WORKER = Path(__file__).with_name("elastic_worker.py")
BEFORE = 4
"""Outputs each data partition reads before the change."""
AFTER = 4
"""Outputs each data partition reads at least after it (and at least the rest of its epoch)."""

PER_BUFFER = {"packing": {"name": "first-fit-decreasing"}, "packing_buffer_size": 6}
CARRY_OVER = {
    "packing": {"name": "first-fit-decreasing", "options": {"carry_over": True}},
    "packing_buffer_size": 6,
}


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Old and new layout (ranks, loader workers per rank), their extra datamodule arguments,
    the arguments both share, and whether the window is exactly one epoch, every training
    sample once (no shuffle buffer, no packing)."""

    old: tuple[int, int]
    new: tuple[int, int]
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    old_extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    new_extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    one_epoch: bool = False


SCENARIOS = [
    pytest.param(Scenario(old=(4, 0), new=(2, 0)), id="dp4-to-2"),
    pytest.param(
        Scenario(old=(2, 2), new=(3, 1), options=CARRY_OVER),
        id="dp2x2-to-3x1-carry-over",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        Scenario(
            old=(3, 1),
            new=(4, 1),
            options=PER_BUFFER,
            old_extra={"data_partitions": 12},
            new_extra={"data_partitions": 12},
        ),
        id="dp3-to-4-packing",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        # no shuffle buffer: Energon's buffer sits above its repeat, so with one an epoch's
        # last samples mix with the next epoch's first and no window holds exactly one epoch
        Scenario(old=(2, 2), new=(2, 1), options={"shuffle_buffer_size": None}, one_epoch=True),
        id="workers2-to-1-whole-epoch",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        Scenario(old=(2, 1), new=(2, 2), options=CARRY_OVER, old_extra={"data_partitions": 4}),
        id="workers1-to-2-carry-over",
        marks=pytest.mark.slow,
    ),
]


@pytest.fixture(scope="module")
def dataset(data_root):
    """100 VQA samples, 5 per shard: 16 training shards (80 samples), enough for 12 partitions."""
    from energon_plugins.synthetic import write_dataset

    return write_dataset(data_root / "elastic-resume-vqa", kind="vqa", num_samples=100, samples_per_shard=5)


def run_scenario(scenario: Scenario, dataset, work: Path) -> dict[str, list[dict[str, Any]]]:
    """Run the worker (the old layout, then the new one); every rank's result per phase."""
    spec = {
        "dataset": str(dataset.path),
        "work": str(work),
        "old": {"ranks": scenario.old[0], "workers": scenario.old[1], "extra": scenario.old_extra},
        "new": {"ranks": scenario.new[0], "workers": scenario.new[1], "extra": scenario.new_extra},
        "options": scenario.options,
        "before": BEFORE,
        "after": AFTER,
    }
    (work / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    proc = run_worker(WORKER, work / "spec.json", timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-5000:]
    ranks = {"old": scenario.old[0], "new": scenario.new[0]}
    return {
        phase: [
            json.loads((work / phase / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(count)
        ]
        for phase, count in ranks.items()
    }


def by_partition(ranks: list[dict[str, Any]], field: str = "partitions") -> dict[int, list[list[str]]]:
    """The batches of every partition over all ranks of a phase; a partition read by two ranks
    fails."""
    merged: dict[int, list[list[str]]] = {}
    for result in ranks:
        for partition, batches in result[field].items():
            assert int(partition) not in merged, f"partition {partition} read by two ranks"
            merged[int(partition)] = batches
    return merged


def sample_keys(batches: list[list[str]]) -> list[str]:
    """The sample keys of ``batches`` (a packed row joins its keys with commas)."""
    return [key for batch in batches for row in batch for key in row.split(",") if key]


def difference(got: list[str], expected: list[str]) -> str:
    """The keys ``got`` lacks and those it has too often, compared with ``expected``."""
    have, want = collections.Counter(got), collections.Counter(expected)
    if have == want:
        return "the same keys in another order or other batches"
    return f"lost {sorted((want - have).elements())}, repeated {sorted((have - want).elements())}"


def check_positions(ranks: list[dict[str, Any]], field: str, offset: int) -> None:
    """A partitioned loader's saved ``positions`` (its last consumed output per partition)
    agree with the batches filed under each partition."""
    for result in ranks:
        if result["layout"]["partitioned"]:
            expected = {p: offset + len(batches) - 1 for p, batches in result[field].items()}
            assert result["positions"] == expected, f"rank {result['rank']} ({result['phase']})"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_resume_on_another_layout_continues_every_partition_exactly(scenario, dataset, tmp_path):
    results = run_scenario(scenario, dataset, tmp_path)
    old, new = by_partition(results["old"]), by_partition(results["new"])
    reference = by_partition(results["old"], "reference")
    partitions = results["old"][0]["layout"]["partitions"]
    assert sorted(old) == sorted(new) == sorted(reference) == list(range(partitions))
    assert [r["layout"]["dp_size"] for r in results["new"]] == [scenario.new[0]] * scenario.new[0]
    assert all(r["layout"]["num_workers"] == scenario.new[1] for r in results["new"])
    assert all(len(batches) == BEFORE for batches in old.values())
    epochs = {int(p): n for r in results["old"] for p, n in r["epoch"].items()}
    assert sorted(epochs) == list(range(partitions))
    after = {p: max(AFTER, epochs[p] - BEFORE) for p in new}  # the epoch in progress, whole
    assert all(len(new[p]) >= count for p, count in after.items())
    problems = []
    for partition in range(partitions):
        resumed = old[partition] + new[partition][: after[partition]]
        expected = reference[partition][: BEFORE + after[partition]]
        if resumed != expected:
            problems.append(
                f"partition {partition}: {difference(sample_keys(resumed), sample_keys(expected))}"
            )
    assert not problems, "\n".join(problems)
    check_positions(results["old"], "reference", 0)
    check_positions(results["new"], "partitions", BEFORE)

    if scenario.one_epoch:
        # the partitions' epochs are their shard slices: together, the training split
        assert all(BEFORE + after[p] == epochs[p] for p in after)
        read = sample_keys([b for p in range(partitions) for b in old[p] + new[p][: after[p]]])
        train = dataset.split_keys["train"]
        assert collections.Counter(read) == collections.Counter(train), difference(read, train)
        assert len(read) == len(set(read)) == len(train)
