"""Four real processes (gloo), megatron-core process groups DP=2 x CP=2 and DP=4, real Energon
loaders.

Ranks are laid out as megatron-core does (order tp-cp-ep-dp-pp): with CP=2, ranks {0, 1} are the
CP pair of DP replica 0, ranks {2, 3} that of replica 1; with DP=4 every rank is a replica.
"""

import json
from pathlib import Path

import pytest

from energon_plugins.synthetic import write_dataset
from tests._ranks import run_worker

WORLD = 4
WORKER = Path(__file__).with_name("distributed_worker.py")


def test_rank_layout_matches_megatron_core():
    from energon_plugins.loading.distributed import rank_groups

    groups = rank_groups(4, cp=2)
    assert groups["cp"] == [[0, 1], [2, 3]]
    assert groups["dp"] == [[0, 2], [1, 3]]
    assert groups["dp-cp"] == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="not a multiple"):
        rank_groups(6, cp=4)


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    # train: 8 shards (>= DP 2 x any worker count used here); val: 2 shards of 5
    big = write_dataset(root / "big", kind="vqa", num_samples=50, samples_per_shard=5)
    # a val split of one shard of 3 samples: fewer samples than DP ranks x val workers (2 x 2)
    small = write_dataset(root / "small", kind="vqa", num_samples=23, samples_per_shard=5)
    assert len(small.split_keys["val"]) == 3
    out = root / "out"
    out.mkdir()
    proc = run_worker(WORKER, WORLD, root / "rendezvous", big.path, small.path, out, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-5000:]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    return big, small, out, results


def describe_keys(batch):
    """The keys of a batch as the worker's ``describe`` records them."""
    return list(batch["__keys__"])


def keys_of(batches):
    return [key for batch in batches for key in batch["keys"] if key != PADDING_KEY]


PADDING_KEY = "__padding__"


@pytest.mark.slow
def test_ranks_and_groups(distributed_run):
    _, _, _, results = distributed_run
    assert [(r["dp_rank"], r["cp_rank"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["dp_size"] == 2 for r in results)


@pytest.mark.slow
def test_dp_replicas_split_the_val_pass_and_cp_peers_agree(distributed_run):
    big, _, _, results = distributed_run
    replica0, replica1 = results[0]["val"], results[2]["val"]
    assert results[1]["val"] == replica0, "CP peers of replica 0 read identical batches"
    assert results[3]["val"] == replica1, "CP peers of replica 1 read identical batches"
    k0, k1 = keys_of(replica0), keys_of(replica1)
    assert not set(k0) & set(k1), "DP replicas read disjoint samples"
    assert sorted(k0 + k1) == sorted(big.split_keys["val"]), "their union is the split"
    assert len(k0) + len(k1) == len(big.split_keys["val"]), "each sample once"
    assert all(r["val_again"] == r["val"] for r in results), "every evaluation reads the same"


@pytest.mark.slow
def test_dp_replicas_train_on_different_data_and_cp_peers_on_the_same(distributed_run):
    big, _, _, results = distributed_run
    for field in ("train_before", "train_after"):
        assert results[0][field] == results[1][field]
        assert results[2][field] == results[3][field]
        assert not set(keys_of(results[0][field])) & set(keys_of(results[2][field]))
    assert set(keys_of(results[0]["train_before"])) <= set(big.split_keys["train"])


@pytest.mark.slow
def test_save_and_restore_per_dp_rank(distributed_run):
    _, _, out, results = distributed_run
    files = sorted(p.name for p in (out / "ckpt").iterdir())
    assert files == ["train_dataloader_dprank000.pt", "train_dataloader_dprank001.pt"]
    for r in results:
        assert r["train_resumed"] == r["train_after"], f"rank {r['rank']} resumed exactly"


@pytest.mark.slow
def test_val_split_smaller_than_ranks_times_workers(distributed_run):
    _, small, _, results = distributed_run
    k0, k1 = (
        keys_of([{"keys": b} for b in results[0]["small_val"]]),
        keys_of([{"keys": b} for b in results[2]["small_val"]]),
    )
    assert results[1]["small_val"] == results[0]["small_val"]
    assert sorted(k0 + k1) == sorted(small.split_keys["val"])
    assert len(results[0]["small_val"]) == len(results[2]["small_val"]), "padded to one length"


@pytest.mark.slow
def test_a_state_saved_by_another_world_size_continues_on_one_rank(
    distributed_run, tokenizer, clip_processor
):
    """DP 2 -> 1 (issue 28): load_checkpoint reads both ranks' files, and the one rank takes
    the two ranks' streams in turn, each where it stopped."""
    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.loading.checkpoint import load_datamodule_state

    big, _, out, results = distributed_run
    dm = EnergonMultiModalDataModule(
        str(big.path),
        tokenizer,
        clip_processor,
        seq_length=300,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=20,
    )
    load_datamodule_state(dm, out / "ckpt")
    loader = dm.train_dataloader()
    got = [describe_keys(next(loader)) for _ in range(2)]
    assert got == [results[0]["train_after"][0]["keys"], results[2]["train_after"][0]["keys"]]


@pytest.mark.slow
def test_a_rank_beyond_the_saved_world_is_told_why(distributed_run, tokenizer, clip_processor, tmp_path):
    """DP rank 2 of a world of 4 finds no file in a checkpoint of world 2: the message says why."""
    import shutil

    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.loading.checkpoint import StateMismatchError, load_datamodule_state

    big, _, out, _ = distributed_run
    dm = EnergonMultiModalDataModule(
        str(big.path),
        tokenizer,
        clip_processor,
        seq_length=300,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=20,
    )
    from megatron.energon import WorkerConfig

    dm._build_worker_config = lambda n, split="train", **kw: WorkerConfig(
        rank=2,
        world_size=4,
        num_workers=n,
        **({"global_error_handler": kw["error_handler"]} if kw.get("error_handler") else {}),
    )
    ckpt = tmp_path / "ckpt"
    shutil.copytree(out / "ckpt", ckpt)
    with pytest.raises(
        StateMismatchError,
        match=r"no loader state for DP rank 2.*dp_world_size: "
        r"saved 2, now 4",
    ):
        load_datamodule_state(dm, ckpt)


# ---------------------------------------------------------------------------- evaluation
EVAL_CASES = ["dp2cp2-big", "dp2cp2-small", "dp4-big", "dp4-small"]


def replicas(results, case):
    """One result per DP replica (CP rank 0 under CP=2; every rank under DP=4)."""
    if case.startswith("dp4"):
        return [r["eval"][case] for r in results]
    return [r["eval"][case] for r in results if r["cp_rank"] == 0]


@pytest.mark.slow
@pytest.mark.parametrize("case", EVAL_CASES)
def test_every_rank_evaluates_the_same_number_of_batches(distributed_run, case):
    _, _, _, results = distributed_run
    lengths = {r["eval"][case]["n"] for r in results}
    assert len(lengths) == 1 and lengths.pop() >= 1
    for r in results:
        assert all(len(run["keys"]) <= r["eval"][case]["n"] for run in r["eval"][case]["runs"])


@pytest.mark.slow
@pytest.mark.parametrize("case", EVAL_CASES)
def test_every_validation_sample_is_evaluated_exactly_once_per_pass(distributed_run, case):
    big, small, _, results = distributed_run
    split = sorted((big if case.endswith("big") else small).split_keys["val"])
    for evaluation in range(3):
        keys = [
            k for rep in replicas(results, case) for batch in rep["runs"][evaluation]["keys"] for k in batch
        ]
        assert sorted(keys) == split, f"evaluation {evaluation}"


@pytest.mark.slow
@pytest.mark.parametrize("case", EVAL_CASES)
def test_loss_reduction_completes_and_evaluations_repeat(distributed_run, case):
    _, _, _, results = distributed_run
    reps = replicas(results, case)
    for evaluation in range(3):
        total = sum(rep["runs"][evaluation]["loss"] for rep in reps)
        assert total > 0
        for r in results:  # every rank got the same all-reduced sums
            run = r["eval"][case]["runs"][evaluation]
            assert run["reduced_sum"] == pytest.approx(total)
            assert run["reduced"] == pytest.approx(total)
    for r in results:
        runs = r["eval"][case]["runs"]
        assert runs[0] == runs[1] == runs[2], "three evaluations, identical batches and losses"
    if case.startswith("dp2cp2"):
        assert results[0]["eval"][case] == results[1]["eval"][case], "CP peers read the same"
        assert results[2]["eval"][case] == results[3]["eval"][case]


@pytest.mark.slow
def test_uneven_ranks_were_padded(distributed_run):
    """The set-ups really are uneven: some DP ranks have fewer real batches than others (one,
    in DP=4 on the small split, none at all), so the equal lengths above come from padding."""
    _, _, _, results = distributed_run
    for case in ("dp4-big", "dp4-small"):
        real = [len(r["eval"][case]["runs"][0]["keys"]) for r in results]
        assert len(set(real)) > 1, (case, real)
    assert min(len(r["eval"]["dp4-small"]["runs"][0]["keys"]) for r in results) == 0
