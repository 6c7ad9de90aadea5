"""``blend_schedule``: blend weights that change at given sample counts, restored exactly.

A real blend of two Energon datasets (VQA, captioning) is read with a schedule that favours
VQA 9:1 for the first 160 samples of the run and captioning 9:1 after; the sources of the
samples, in order, must follow the stages; a run saved and restored (before and across the
switch) must yield exactly the batches of the uninterrupted run; bad schedules are refused
naming the stage and the entry.
"""

import pytest

import energon_plugins
from energon_plugins.errors import ConfigError
from tests._refusals import assert_refusal

AT = 160
SCHEDULE = [
    {"at": 0, "weights": {"vqa": 9, "captioning": 1}},
    {"at": AT, "weights": {"vqa": 1, "captioning": 9}},
]


@pytest.fixture(scope="module")
def blend(data_root, vqa_dataset, captioning_dataset):
    path = data_root / "scheduled.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 1\n        path: vqa\n      - weight: 1\n        path: captioning\n"
        "  val:\n    path: vqa\n"
    )
    return path


def datamodule(path, tokenizer, processor, workers=0, schedule=SCHEDULE, shuffle=None, **extra):
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tokenizer,
        processor,
        seq_length=256,
        micro_batch_size=4,
        num_workers=workers,
        blend_schedule=schedule,
        shuffle_buffer_size=shuffle,
        **extra,
    )


def sources(batches):
    return [source for batch in batches for source in batch["__sources__"]]


def vqa_share(items):
    return sum(source == "vqa" for source in items) / len(items)


@pytest.mark.parametrize(
    "workers", [0, pytest.param(2, marks=pytest.mark.slow)], ids=["0-workers", "2-workers"]
)
def test_the_blend_follows_the_stages(blend, tokenizer, small_clip_processor, workers):
    loader = datamodule(blend, tokenizer, small_clip_processor, workers).train_dataloader()
    order = sources(next(loader) for _ in range(2 * AT // 4))
    loader.close()
    # each worker switches at ceil(AT / workers) of its own samples: the run within a batch per worker
    margin = 4 * max(workers, 1)
    before, after = order[: AT - margin], order[AT + margin :]
    assert vqa_share(before) > 0.8, vqa_share(before)
    assert vqa_share(after) < 0.2, vqa_share(after)
    stats = datamodule(blend, tokenizer, small_clip_processor, workers, schedule=None).train_dataloader()
    plain = sources(next(stats) for _ in range(2 * AT // 4))
    stats.close()
    assert 0.3 < vqa_share(plain) < 0.7, "without a schedule the YAML's equal weights hold"


@pytest.mark.parametrize(
    "workers", [0, pytest.param(2, marks=pytest.mark.slow)], ids=["0-workers", "2-workers"]
)
@pytest.mark.parametrize("split_at", [10, 45], ids=["before-switch", "after-switch"])
def test_a_restored_run_continues_in_the_same_stage_with_the_same_draws(
    blend, tokenizer, small_clip_processor, workers, split_at
):
    total = 60
    whole = datamodule(blend, tokenizer, small_clip_processor, workers).train_dataloader()
    expected = [batch["__keys__"] for batch in (next(whole) for _ in range(total))]
    whole.close()
    first = datamodule(blend, tokenizer, small_clip_processor, workers).train_dataloader()
    for _ in range(split_at):
        next(first)
    state = first.save_state()
    first.close()
    resumed = datamodule(blend, tokenizer, small_clip_processor, workers).train_dataloader()
    resumed.restore_state(state)
    rest = [next(resumed)["__keys__"] for _ in range(total - split_at)]
    resumed.close()
    assert rest == expected[split_at:]


def test_a_shuffle_buffer_moves_the_switch_by_at_most_its_size(blend, tokenizer, small_clip_processor):
    """``at`` counts the samples the blend has drawn; a shuffle buffer of S samples holds them
    before they are batched, so batches change mix S samples earlier, over about S samples."""
    size = 40
    loader = datamodule(blend, tokenizer, small_clip_processor, shuffle=size).train_dataloader()
    order = sources(next(loader) for _ in range((2 * AT + size) // 4))
    loader.close()
    assert vqa_share(order[: AT - size]) > 0.8
    assert vqa_share(order[AT + size :]) < 0.2


def test_a_stage_that_starts_later_keeps_the_yaml_weights_until_then(blend, tokenizer, small_clip_processor):
    schedule = [{"at": AT, "weights": {"vqa": 1, "captioning": 99}}]
    loader = datamodule(blend, tokenizer, small_clip_processor, schedule=schedule).train_dataloader()
    order = sources(next(loader) for _ in range(2 * AT // 4))
    loader.close()
    assert 0.3 < vqa_share(order[:AT]) < 0.7
    assert vqa_share(order[AT:]) < 0.1


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "schedule, names",
    [
        (
            [{"at": 0, "weights": {"vqa": 1, "ocr": 1, "captioning": 1}}],
            ["blend_schedule[0].weights", "'ocr'"],
        ),
        ([{"at": 0, "weights": {"vqa": 1}}], ["blend_schedule[0].weights", "missing: captioning"]),
        ([{"at": 0, "weights": {"vqa": 0, "captioning": 1}}], ["blend_schedule.0.weights", "vqa: 0"]),
        (
            [
                {"at": 5, "weights": {"vqa": 1, "captioning": 1}},
                {"at": 5, "weights": {"vqa": 2, "captioning": 1}},
            ],
            ["blend_schedule", "increasing `at`"],
        ),
        ([{"at": -1, "weights": {"vqa": 1, "captioning": 1}}], ["blend_schedule.0.at"]),
        ([{"weights": {"vqa": 1, "captioning": 1}}], ["blend_schedule.0.at"]),
    ],
    ids=["unknown-entry", "missing-entry", "zero-weight", "not-increasing", "negative-at", "no-at"],
)
def test_bad_schedules_are_refused_naming_the_stage(blend, tokenizer, schedule, names):
    with pytest.raises(ConfigError) as caught:
        datamodule(blend, tokenizer, None, schedule=schedule)
    assert_refusal(str(caught.value), *names)


@pytest.mark.bad_input
def test_a_schedule_needs_a_blend(vqa_dataset, tokenizer):
    with pytest.raises(ConfigError, match="blend_schedule: .* is one dataset, not a metadataset blend"):
        datamodule(vqa_dataset.path, tokenizer, None)


@pytest.mark.bad_input
def test_validate_names_a_stage_whose_entries_do_not_match_the_blend(blend, tmp_path):
    from click.testing import CliRunner

    from energon_plugins.cli.main import cli
    from energon_plugins.synthetic import save_demo_tokenizer

    save_demo_tokenizer(tmp_path / "tok")
    config = tmp_path / "run.yaml"
    config.write_text(
        f"path: {blend}\ntokenizer:\n  path: {tmp_path / 'tok'}\nblend_schedule:\n"
        "  - at: 0\n    weights: {vqa: 1, captioning: 1}\n  - at: 100\n    weights: {vqa: 1, ocr: 3}\n"
    )
    result = CliRunner().invoke(cli, ["validate", "--quick", str(config)])
    assert result.exit_code == 1
    assert_refusal(result.output, "blend_schedule[1].weights: no blend entry 'ocr'", "missing: captioning")
    config.write_text(config.read_text().replace("ocr: 3", "captioning: 3"))
    assert CliRunner().invoke(cli, ["validate", "--quick", str(config)]).exit_code == 0


def test_stages_may_change_on_resume_but_not_the_presence_of_a_schedule(
    blend, tokenizer, small_clip_processor
):
    from energon_plugins.loading.checkpoint import StateMismatchError

    first = datamodule(blend, tokenizer, small_clip_processor).train_dataloader()
    for _ in range(5):
        next(first)
    state = first.save_state()
    first.close()
    later = [{"at": 0, "weights": {"vqa": 1, "captioning": 99}}]
    extended = datamodule(blend, tokenizer, small_clip_processor, schedule=later).train_dataloader()
    extended.restore_state(state)
    assert vqa_share(sources(next(extended) for _ in range(20))) < 0.1, "the new stage holds"
    extended.close()
    plain = datamodule(blend, tokenizer, small_clip_processor, schedule=None).train_dataloader()
    with pytest.raises(StateMismatchError, match="blend_schedule: saved True, now False"):
        plain.restore_state(state)
    plain.close()
