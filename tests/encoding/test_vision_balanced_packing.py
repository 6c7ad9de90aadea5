"""``vision-balanced`` packing: the contract, both budgets, balance against first-fit
decreasing, the patches read from encoded samples, and a datamodule run that resumes exactly."""

import pickle
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import energon_plugins
from energon_plugins.encoding.packing.vision_balanced import VisionBalancedOptions, vision_patches
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.errors import PluginOptionsError
from energon_plugins.testing import batch_differences, check_packing_strategy

CAPACITY = 256
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (length, patches of each image/video) per sample: text-only samples have no patches
sample_st = st.tuples(
    st.integers(min_value=0, max_value=CAPACITY),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=4),
)


def make(**options):
    """Build ``vision-balanced`` through the registry, as a config would."""
    return energon_plugins.create("packing_strategy", "vision-balanced", options or None)


def costs_of(plan, patches):
    """Vision cost (patches) of every group of ``plan``."""
    return [sum(sum(patches[i]) for i in group) for group in plan.groups]


def skewed_buffer(seed, size=400):
    """A buffer where a few samples carry most of the vision work (videos); at most 495 tokens."""
    rng = random.Random(seed)
    lengths, patches = [], []
    for _ in range(size):
        kind = rng.random()
        if kind < 0.1:  # video
            p = [rng.randint(2000, 6000)]
        elif kind < 0.7:  # one image
            p = [rng.randint(64, 600)]
        else:  # text only
            p = []
        patches.append(p)
        lengths.append(sum(x // 16 for x in p) + rng.randint(5, 120))
    return lengths, patches


def test_conformance_with_defaults_and_a_fixed_budget():
    assert check_packing_strategy("vision-balanced").name == "vision-balanced"
    check_packing_strategy("vision-balanced", options={"vision_budget": 100, "vision_cost": "quadratic"})


@pytest.mark.parametrize(
    "options",
    [{"vision_budget": 0}, {"vision_budget": "half"}, {"budget_slack": 0.9}, {"vision_cost": "cubic"}],
    ids=["budget-0", "budget-text", "slack-below-1", "cost-unknown"],
)
@pytest.mark.bad_input
def test_bad_options_are_refused_naming_the_field(options):
    with pytest.raises(PluginOptionsError, match=next(iter(options))):
        make(**options)


@SETTINGS
@given(samples=st.lists(sample_st, max_size=60), budget=st.integers(min_value=1, max_value=8000))
def test_both_budgets_hold_and_every_sample_is_placed_once(samples, budget):
    lengths = [length for length, _ in samples]
    patches = [p for _, p in samples]
    plan = make(vision_budget=budget).plan(lengths, CAPACITY, patches)
    placed = sorted(i for group in plan.groups for i in group)
    assert placed == list(range(len(samples)))
    for group, cost in zip(plan.groups, costs_of(plan, patches), strict=True):
        assert group == sorted(group)
        assert sum(lengths[i] for i in group) <= CAPACITY
        assert cost <= budget or len(group) == 1, (group, cost)
    assert [g[0] for g in plan.groups] == sorted(g[0] for g in plan.groups)


@SETTINGS
@given(samples=st.lists(sample_st, max_size=60))
def test_auto_budget_is_met_and_the_plan_is_deterministic(samples):
    lengths = [length for length, _ in samples]
    patches = [p for _, p in samples]
    strategy = make(budget_slack=1.1)
    plan = strategy.plan(lengths, CAPACITY, patches)
    assert plan == strategy.plan(list(lengths), CAPACITY, [list(p) for p in patches])
    for group in plan.groups:
        assert sum(lengths[i] for i in group) <= CAPACITY


@pytest.mark.parametrize("seed", range(4))
def test_imbalance_is_lower_than_first_fit_decreasing_at_nearly_its_fill(seed):
    lengths, patches = skewed_buffer(seed)
    ffd = energon_plugins.create("packing_strategy", "first-fit-decreasing").plan(lengths, 4 * CAPACITY)
    balanced = make().plan(lengths, 4 * CAPACITY, patches)
    ffd_costs, balanced_costs = costs_of(ffd, patches), costs_of(balanced, patches)
    spread = lambda costs: max(costs) / (sum(costs) / len(costs))
    assert spread(balanced_costs) < spread(ffd_costs)
    assert spread(balanced_costs) <= 1.1
    assert len(balanced.groups) <= len(ffd.groups) + 2


def test_quadratic_cost_weighs_large_images_more():
    linear, quadratic = make(), make(vision_cost="quadratic", attention_patches=1000)
    assert linear.cost([1000, 1000]) == linear.cost([2000]) == 2000
    assert quadratic.cost([1000, 1000]) == 4000 < quadratic.cost([2000]) == 6000


def test_without_patches_it_packs_like_first_fit_decreasing():
    lengths, _ = skewed_buffer(7)
    ffd = energon_plugins.create("packing_strategy", "first-fit-decreasing")
    assert make().select(lengths, 4 * CAPACITY) == ffd.select(lengths, 4 * CAPACITY)


@pytest.mark.parametrize(
    ("patches", "message"),
    [([[1]], "2 samples"), ([[1], [-3]], "sample 1"), ([[1], [2.5]], "sample 1")],
    ids=["too-few", "negative", "float"],
)
@pytest.mark.bad_input
def test_bad_patches_are_refused_naming_the_sample(patches, message):
    with pytest.raises(ValueError, match=message):
        make().plan([3, 4], CAPACITY, patches)


def test_patches_are_read_from_grids_then_token_counts():
    ids = torch.zeros(10, dtype=torch.long)
    text = EncodedSample(__key__="t", __restore_key__=(), input_ids=ids, labels=ids, loss_mask=ids.float())
    assert vision_patches(text) == []
    sample = EncodedSample(
        __key__="v",
        __restore_key__=(),
        input_ids=ids,
        labels=ids,
        loss_mask=ids.float(),
        image_grid_thw=torch.tensor([[1, 4, 6], [1, 2, 2]]),
        image_token_counts=[6, 1],
        visual={"video_grid_thw": torch.tensor([[4, 2, 2]])},
        video_token_counts=[4],
    )
    assert vision_patches(sample) == [24, 4, 16]
    counted = EncodedSample(
        __key__="c",
        __restore_key__=(),
        input_ids=ids,
        labels=ids,
        loss_mask=ids.float(),
        image_token_counts=[6, 9],
    )
    assert vision_patches(counted) == [6, 9]


SEQ = 128
IMAGE_TOKENS = 6


def make_dm(info, tokenizer, processor, options):
    """A datamodule packing with ``vision-balanced`` (``options``) on the VQA dataset."""
    return energon_plugins.EnergonMultiModalDataModule(
        str(info.path),
        tokenizer,
        processor,
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        packing_buffer_size=8,
        packing=energon_plugins.create("packing_strategy", "vision-balanced", options),
        task_encoder={"name": "multimodal", "options": {"image_tokens": IMAGE_TOKENS}},
    )


def test_datamodule_packs_under_the_vision_budget_and_resumes_exactly(vqa_dataset, tokenizer, clip_processor):
    options = VisionBalancedOptions(vision_budget=2 * IMAGE_TOKENS, carry_over=True)
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, options)
    loader = dm.train_dataloader()
    per_row = []
    for _ in range(4):
        # the encoder hands each sample's image tokens to the strategy: every VQA sample has one
        # image, so a row holds at most 2 samples (length alone would pack about 5 per row)
        per_row += [len(keys.split(",")) for keys in next(loader)["__keys__"]]
    assert max(per_row) == 2
    state = pickle.loads(pickle.dumps(loader.save_state()))
    expected = [next(loader) for _ in range(4)]
    del loader, dm

    resumed = make_dm(vqa_dataset, tokenizer, clip_processor, options).train_dataloader()
    resumed.restore_state(state)
    for want in expected:
        assert batch_differences(next(resumed), want) == []
