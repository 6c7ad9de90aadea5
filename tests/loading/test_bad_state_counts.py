"""Tampered counters in a loader state: refused by name before anything reads them.

``skip_counts`` and ``source_stats`` are plain mappings a state file carries beside Energon's
state; a foreign or edited file may hold anything there. Each row restores a real state with
one of them replaced, through ``restore_state`` (one state) and through the list of every
rank's state (the elastic path): a ``StateShapeError`` naming the field, never a raw
``ValueError`` or ``AttributeError`` from deep inside the restore.
"""

import copy

import pytest

import energon_plugins
from energon_plugins.loading.state_check import StateShapeError

pytestmark = pytest.mark.bad_input

BAD = [
    ("source_stats", [1, 2]),
    ("source_stats", {0: "nope"}),
    ("source_stats", {"w": {}}),
    ("source_stats", {0: {"vqa": {"samples": "abc"}}}),
    ("source_stats", {0: {"vqa": {"samples": 10**30}}}),
    ("source_stats", {0: {"vqa": {"samples": -1}}}),
    ("source_stats", {0: {"vqa": {"samples": 1, "skipped": {"x": True}}}}),
    ("skip_counts", {0: "nope"}),
    ("skip_counts", {0: {"corrupt": "abc"}}),
    ("skip_counts", {"w": {}}),
]


@pytest.fixture(scope="module")
def saved(vqa_dataset, tokenizer, clip_processor):
    def build():
        return energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path),
            tokenizer,
            clip_processor,
            seq_length=300,
            micro_batch_size=2,
            num_workers=0,
        )

    loader = build().train_dataloader()
    next(iter(loader))
    return build, loader.save_state()


@pytest.mark.parametrize("as_list", [False, True], ids=["one", "every-rank"])
@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_tampered_counts_are_refused_by_name(saved, field, value, as_list):
    build, state = saved
    bad = copy.deepcopy(state)
    bad[field] = value
    with pytest.raises(StateShapeError) as raised:
        build().train_dataloader().restore_state([bad] if as_list else bad)
    assert field in str(raised.value)


def test_the_untampered_state_restores(saved):
    build, state = saved
    build().train_dataloader().restore_state(copy.deepcopy(state))
