"""Restoring on another number of ranks or workers (issue 28), one process per layout step.

Each data-parallel rank is a datamodule with its own rank in a ``pg_collection`` (no process
group is needed to build a loader), so the layouts change within one test. A run saves every
rank's state after ``BEFORE`` batches; a run of another layout restores the list and reads
until each data partition advanced ``AFTER`` more outputs; the keys read over both runs must
equal, as a multiset, those of an uninterrupted run in which every partition advanced
``BEFORE``-worth + ``AFTER`` outputs: nothing lost, nothing repeated, also what sat in shuffle
and packing buffers at the save; the skip counts (4 corrupt images) carry over. The real multi-process runs (gloo) are in
``test_elastic_resume.py``.
"""

import collections
import pickle

import pytest
import transformers

from energon_plugins import EnergonMultiModalDataModule
from energon_plugins.errors import ConfigError
from energon_plugins.loading.checkpoint import StateMismatchError
from tests._ranks import dp_collection

BEFORE = 5
AFTER = 4


@pytest.fixture(scope="module")
def dataset(data_root):
    from energon_plugins.synthetic import write_dataset

    written = write_dataset(
        data_root / "elastic-vqa", kind="vqa", num_samples=120, samples_per_shard=5, corrupt={"image": 4}
    )
    return written.path


@pytest.fixture(scope="module")
def make(dataset, tokenizer):
    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )

    def build(rank: int, ranks: int, workers: int, packing: bool = False, **extra):
        if packing:
            extra.update(
                packing={"name": "first-fit-decreasing", "options": {"carry_over": True}},
                packing_buffer_size=6,
            )
        arguments = {
            "seq_length": 300,
            "micro_batch_size": 2,
            "num_workers": workers,
            "shuffle_buffer_size": 10,
            "pg_collection": dp_collection(rank, ranks),
            "checkpoint_every_sec": 60,  # Energon's default: restores replay from older checkpoints
            "checkpoint_every_min_n_samples": None,
        }
        return EnergonMultiModalDataModule(dataset, tokenizer, processor, **{**arguments, **extra})

    return build


def keys(batch) -> list[str]:
    """The sample keys of a megatron-bridge batch (a packed row joins its keys with commas)."""
    return [key for row in batch["__keys__"] for key in str(row).split(",") if key]


def run(make, ranks: int, workers: int, batches_per_partition: int, packing: bool, states=None, **extra):
    """Every rank of a layout: ``(keys read, states saved at the end)``; with ``states`` each rank
    first restores the list. The skipped samples of all ranks (cumulative since the start of
    the run) are in ``run.skipped``, the samples their ``stats()`` count in ``run.samples``."""
    seen: collections.Counter[str] = collections.Counter()
    run.skipped = collections.Counter()
    run.samples = 0
    saved = []
    for rank in range(ranks):
        loader = make(rank, ranks, workers, packing, **extra).train_dataloader()
        try:
            if states is not None:
                loader.restore_state(states)
            owned = len(loader.layout.owned()) if loader.layout.partitioned else max(workers, 1)
            for _ in range(batches_per_partition * owned):
                seen.update(keys(next(loader)))
            saved.append(pickle.loads(pickle.dumps(loader.save_state())))
            run.skipped.update(loader.skip_counts())
            run.samples += sum(counters["samples"] for counters in loader.stats().values())
        finally:
            loader.close()
    return seen, saved


@pytest.mark.parametrize(
    ("old", "new", "packing"),
    [((4, 0), (2, 0), False), ((2, 2), (3, 1), True)],
    ids=["dp4-to-2", "2x2-to-3x1-carry-over"],
)
def test_a_resume_on_another_layout_reads_every_sample_once(make, old, new, packing):
    before, states = run(make, *old, BEFORE, packing)
    after, _ = run(make, *new, AFTER, packing, states=states)
    skipped = run.skipped
    # stats() carries over too: the new ranks' cumulative sample counts cover both runs
    assert run.samples == sum((before + after).values())
    run(make, *new, 0, packing, states=states)  # restored, no batch read yet
    assert run.samples == sum(before.values())
    reference, _ = run(make, *old, BEFORE + AFTER, packing)
    assert before + after == reference
    assert skipped == run.skipped and sum(skipped.values()) > 0  # the corrupt images, counted once


@pytest.mark.slow
def test_a_chain_of_layouts_saved_before_the_first_batch_stays_exact(make):
    first, states = run(make, 2, 2, BEFORE, True)
    # 3 x 1, one rank saving right after its restore (Energon has no state of it yet)
    loader = make(0, 3, 1, True).train_dataloader()
    loader.restore_state(states)
    early = pickle.loads(pickle.dumps(loader.save_state()))
    loader.close()
    assert "partition_states" in early
    again = make(0, 3, 1, True).train_dataloader()
    again.restore_state(early)
    middle_states, middle = [], collections.Counter()
    for rank in range(3):
        loader = again if rank == 0 else make(rank, 3, 1, True).train_dataloader()
        if rank:
            loader.restore_state(states)
        for _ in range(AFTER * len(loader.layout.owned())):
            middle.update(keys(next(loader)))
        middle_states.append(pickle.loads(pickle.dumps(loader.save_state())))
        loader.close()
    last, _ = run(make, 1, 2, AFTER, True, states=middle_states)
    reference, _ = run(make, 2, 2, BEFORE + 2 * AFTER, True)
    assert first + middle + last == reference


def test_the_infinite_validation_loader_moves_to_another_layout_too(make):
    def read(ranks: int, per_rank: int, states=None):
        seen: collections.Counter[str] = collections.Counter()
        saved = []
        for rank in range(ranks):
            loader = make(rank, ranks, 0, validation_mode="infinite").val_dataloader()
            if states is not None:
                loader.restore_state(states)
            seen.update(key for _ in range(per_rank) for key in keys(next(loader)))
            saved.append(pickle.loads(pickle.dumps(loader.save_state())))
            loader.close()
        return seen, saved

    before, states = read(2, 2)
    after, _ = read(1, 2 * 3, states)  # one rank now runs both partitions: 3 more outputs each
    reference, _ = read(2, 2 + 3)
    assert before + after == reference


def test_a_run_started_with_data_partitions_grows_past_its_workers(make):
    # 3 ranks run 12 partitions, 4 each; 4 ranks then run 3 each (the setting kept or left out)
    before, states = run(make, 3, 0, 2, False, data_partitions=12)
    kept, _ = run(make, 4, 0, 2, False, states=states, data_partitions=12)
    left_out, _ = run(make, 4, 0, 2, False, states=states)
    reference, _ = run(make, 3, 0, 4, False, data_partitions=12)
    assert before + kept == reference == before + left_out


def test_data_partitions_equal_to_the_workers_keep_todays_order(make):
    plain, _ = run(make, 2, 2, 3, False)
    partitioned, states = run(make, 2, 2, 3, False, data_partitions=4)
    assert plain == partitioned
    assert states[0]["layout"] == {
        "partitions": 4,
        "virtual_workers": 2,
        "dp_size": 2,
        "dp_rank": 0,
        "num_workers": 2,
    }


def test_the_seed_sets_the_order(make):
    def first_keys(seed: int) -> list[str]:
        loader = make(0, 1, 0, seed=seed).train_dataloader()
        try:
            return [key for _ in range(3) for key in keys(next(loader))]
        finally:
            loader.close()

    assert first_keys(0) == first_keys(0)
    assert first_keys(0) != first_keys(7)


def test_a_state_saved_with_another_seed_is_refused(make):
    loader = make(0, 1, 0).train_dataloader()
    next(loader)
    state = loader.save_state()
    loader.close()
    with pytest.raises(StateMismatchError, match="seed: saved 0, now 3"):
        make(0, 1, 0, seed=3).train_dataloader().restore_state(state)


# ----------------------------------------------------------------------------- refusals
@pytest.fixture(scope="module")
def four_rank_states(make):
    return run(make, 4, 0, 2, False)[1]


@pytest.mark.bad_input
def test_one_state_of_another_rank_count_says_to_pass_every_rank(make, four_rank_states):
    loader = make(0, 2, 0).train_dataloader()
    with pytest.raises(StateMismatchError, match="dp_world_size: saved 4, now 2.*list of every old rank"):
        loader.restore_state(four_rank_states[0])


@pytest.mark.bad_input
def test_a_bare_energon_state_of_another_rank_count_is_refused(make, four_rank_states):
    # Energon restores it without a word, and the run then repeats and drops data
    loader = make(0, 2, 0).train_dataloader()
    with pytest.raises(StateMismatchError, match="another number of data-parallel ranks"):
        loader.restore_state(four_rank_states[0]["energon"])
    same = make(0, 4, 0).train_dataloader()
    same.restore_state(four_rank_states[0]["energon"])  # its own layout: accepted


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("states", "message"),
    [
        (lambda s: s[:3], "3 loader states for a run of 4"),
        (lambda s: [s[1], s[0], s[2], s[3]], "element 0 of the list is rank 1's state"),
        (lambda s: [], "empty list"),
    ],
    ids=["a-rank-missing", "out-of-order", "empty"],
)
def test_an_incomplete_list_is_refused(make, four_rank_states, states, message):
    loader = make(0, 2, 0).train_dataloader()
    with pytest.raises(StateMismatchError, match=message):
        loader.restore_state(states(four_rank_states))


@pytest.mark.bad_input
def test_more_workers_than_partitions_is_refused(make, four_rank_states):
    loader = make(0, 3, 2).train_dataloader()
    with pytest.raises(StateMismatchError, match="4 data partitions.*3 ranks x 2 workers = 6"):
        loader.restore_state(four_rank_states)


@pytest.mark.bad_input
def test_states_of_another_setup_are_refused_by_field(make, four_rank_states):
    loader = make(0, 2, 0, shuffle_buffer_size=11).train_dataloader()
    with pytest.raises(
        StateMismatchError, match="rank 0's loader state.*shuffle_buffer_size: saved 10, now 11"
    ):
        loader.restore_state(four_rank_states)


@pytest.mark.bad_input
def test_too_few_data_partitions_are_refused(make):
    with pytest.raises(ConfigError, match="data_partitions"):
        make(0, 2, 2, data_partitions=3)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("partitioned", "tamper", "message"),
    [
        (True, lambda s: s["layout"].update(partitions=10**12), "partitions=1000000000000"),
        (True, lambda s: s["layout"].update(dp_rank=-1), "dp_rank=-1"),
        (False, lambda s: s["fingerprint"].update(num_workers=10**9), "num_workers=1000000000"),
    ],
    ids=["partitions-10e12", "negative-rank", "workers-10e9"],
)
def test_a_layout_no_run_has_is_refused_before_it_sizes_anything(make, partitioned, tamper, message):
    # a state is untrusted input: its layout's numbers size loops and sets (10**12 partitions
    # would be a set of 10**12 ids), so they are bounded before use
    extra = {"data_partitions": 2} if partitioned else {}
    states = run(make, 2, 0, 1, False, **extra)[1]
    tamper(states[0])
    loader = make(0, 1, 0).train_dataloader()
    with pytest.raises(StateMismatchError, match=f"a loader layout no run has: .*{message}"):
        loader.restore_state(states)
