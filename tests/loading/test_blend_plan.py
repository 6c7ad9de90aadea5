"""``blend plan``: sample weights that give requested token shares, checked on a real blend.

Three Energon datasets whose samples differ in length (VQA, captioning, and long multi-turn
conversations) are blended; the plan measures each entry's mean tokens per sample through
the task encoder, and a run on the planned metadataset must realise the requested token shares
(from the loader's own per-source counters) within 3 percentage points over 2,000 samples,
where the unplanned weights (read as sample shares) miss them by far more.
"""

import pytest
import yaml

import energon_plugins
from energon_plugins.config.blend_plan import blend_entries, planned_weights, requested_shares, write_planned
from energon_plugins.errors import ConfigError, DatasetError
from energon_plugins.loading.token_means import entry_tokens, measure_entries

WANTED = {"vqa": 0.4, "./captioning": 0.2, "long": 0.4}


def write_long_conversations(path):
    """A crude ``chatml`` dataset of 40 four-turn conversations with longer answers."""
    from PIL import Image

    from energon_plugins.testing import write_crude_dataset

    words = "the red square sits left of two green triangles on a blue background".split()
    samples = []
    for n in range(40):
        turns = []
        for t in range(2):
            answer = " ".join(words[(n + t + i) % len(words)] for i in range(12 + n % 5))
            turns += [{"from": "human", "value": f"Question {t} about it?"}, {"from": "gpt", "value": answer}]
        turns[0]["value"] = "<image>\n" + turns[0]["value"]
        samples.append((f"long-{n:03d}", [Image.new("RGB", (32, 32), (n, 2 * n, 3 * n))], turns))
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=5, split_ratio=(("train", 1.0),))


@pytest.fixture(scope="module")
def blend(data_root, vqa_dataset, captioning_dataset):
    if not (data_root / "long").exists():
        write_long_conversations(data_root / "long")
    path = data_root / "plan-three.yaml"
    entries = "".join(f"      - weight: 1\n        path: {p}\n" for p in WANTED)
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"{entries}  val:\n    path: vqa\n"
    )
    return path


def datamodule(path, tokenizer, processor, batch=8):
    return energon_plugins.EnergonMultiModalDataModule(
        str(path), tokenizer, processor, seq_length=512, micro_batch_size=batch, num_workers=0
    )


def realised_shares(path, tokenizer, processor, samples):
    loader = datamodule(path, tokenizer, processor).train_dataloader()
    entries = {e.path: e.sources for e in blend_entries(path)}
    read = 0
    while read < samples:
        next(loader)
        measured = entry_tokens(loader.stats(), entries)
        read = sum(t.samples for t in measured.values())
    loader.close()
    total = sum(t.total("tokens") for t in measured.values())
    # entries in the blend's order, named as WANTED names them (a plan elsewhere rebases paths)
    return {name: t.total("tokens") / total for name, t in zip(WANTED, measured.values(), strict=True)}, read


@pytest.mark.slow
def test_planned_weights_realise_the_token_shares(blend, tmp_path, tokenizer, small_clip_processor):
    entries = blend_entries(blend)
    measured = measure_entries(
        datamodule(blend, tokenizer, small_clip_processor),
        {e.path: e.sources for e in entries},
        per_entry=200,
        max_samples=5_000,
    )
    means = {p: t.mean("tokens") for p, t in measured.items()}
    assert max(means.values()) > 2.5 * min(means.values()), f"the leaves differ in length: {means}"
    weights = planned_weights(requested_shares(entries, WANTED), means)
    planned = write_planned(blend, tmp_path / "planned.yaml", weights)

    shares, read = realised_shares(planned, tokenizer, small_clip_processor, 2_000)
    assert read >= 2_000
    for entry, wanted in WANTED.items():
        assert abs(shares[entry] - wanted) <= 0.03, (entry, shares, WANTED)
    unplanned = write_planned(blend, tmp_path / "unplanned.yaml", {p: w for p, w in WANTED.items()})
    naive, _ = realised_shares(unplanned, tokenizer, small_clip_processor, 2_000)
    assert max(abs(naive[e] - w) for e, w in WANTED.items()) > 0.05, "the plan is needed at all"


def test_a_short_measurement_gives_means_per_entry(blend, tokenizer, small_clip_processor):
    entries = blend_entries(blend)
    assert [(e.path, e.weight, e.sources) for e in entries] == [(p, 1.0, (p,)) for p in WANTED]
    measured = measure_entries(
        datamodule(blend, tokenizer, small_clip_processor, batch=4),
        {e.path: e.sources for e in entries},
        per_entry=5,
        max_samples=400,
    )
    for entry, tokens in measured.items():
        assert tokens.samples >= 5, entry
        assert tokens.mean("tokens") == tokens.total("tokens") / tokens.samples > 0
        assert tokens.total("text_tokens") == tokens.total("tokens") - tokens.total("image_tokens")
        assert 0 < tokens.mean("loss_tokens") < tokens.mean("tokens")


def test_weights_divide_shares_by_mean_tokens():
    weights = planned_weights({"a": 0.5, "b": 0.5}, {"a": 100.0, "b": 300.0})
    assert weights == {"a": 0.75, "b": 0.25}
    shares = {p: weights[p] * m for p, m in {"a": 100.0, "b": 300.0}.items()}
    assert shares["a"] == pytest.approx(shares["b"])


def test_the_written_plan_keeps_everything_but_the_weights(blend, tmp_path):
    weights = {"vqa": 0.1, "./captioning": 0.2, "long": 0.7}
    elsewhere = write_planned(blend, tmp_path / "sub" / "planned.yaml", weights, header="planned\nby a test")
    text = elsewhere.read_text()
    assert text.startswith("# planned\n# by a test\n")
    data = yaml.safe_load(text)
    original = yaml.safe_load(blend.read_text())
    assert [e["weight"] for e in data["splits"]["train"]["blend"]] == [0.1, 0.2, 0.7]
    for mine, theirs in zip(
        data["splits"]["train"]["blend"], original["splits"]["train"]["blend"], strict=True
    ):
        assert (elsewhere.parent / mine["path"]).resolve() == (blend.parent / theirs["path"]).resolve()
    assert (elsewhere.parent / data["splits"]["val"]["path"]).resolve() == (blend.parent / "vqa").resolve()
    beside = write_planned(blend, blend.with_name("plan-beside.yaml"), weights)
    assert [e["path"] for e in yaml.safe_load(beside.read_text())["splits"]["train"]["blend"]] == list(WANTED)
    beside.unlink()


def test_nested_metadatasets_are_planned_as_one_entry(data_root, tmp_path, vqa_dataset, captioning_dataset):
    inner = tmp_path / "inner.yaml"
    inner.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - path: {vqa_dataset.path}\n        weight: 2\n"
        f"      - path: {captioning_dataset.path}\n        weight: 1\n"
    )
    outer = tmp_path / "outer.yaml"
    outer.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - path: inner.yaml\n        weight: 3\n      - path: {vqa_dataset.path}/\n"
    )
    entries = blend_entries(outer)
    assert [(e.path, e.weight) for e in entries] == [("inner.yaml", 3.0), (f"{vqa_dataset.path}/", 1.0)]
    assert entries[0].sources == (str(vqa_dataset.path), str(captioning_dataset.path))
    assert requested_shares(entries, None) == {"inner.yaml": 0.75, f"{vqa_dataset.path}/": 0.25}


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "shares, message",
    [
        ({"vqa": 1, "nope": 1}, "no blend entry 'nope'"),
        ({"vqa": 1}, "missing: ./captioning, long"),
        ({"vqa": 1, "./captioning": 0, "long": 1}, "./captioning: 0 is not a positive number"),
        ({"vqa": 1, "./captioning": float("nan"), "long": 1}, "nan is not a positive number"),
    ],
    ids=["unknown-entry", "missing-entry", "zero-share", "nan-share"],
)
def test_bad_shares_are_refused_naming_the_entry(blend, shares, message):
    with pytest.raises(ConfigError, match=message):
        requested_shares(blend_entries(blend), shares)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "train, message",
    [
        ("    path: vqa\n", "splits.train: not a blend"),
        ("    blend_epochized:\n      - repetitions: 2\n        path: vqa\n", "blend_epochized"),
        ("    blend:\n      - path: vqa\n      - path: vqa\n", "listed twice"),
        ("    blend:\n      - weight: 1\n", r"blend\[0\]: blend plan plans entries with a `path:`"),
        ("    blend:\n      - path: nowhere\n", "path 'nowhere' does not exist"),
    ],
    ids=["not-a-blend", "epochized", "twice", "no-path", "missing-leaf"],
)
def test_blends_that_cannot_be_planned_are_refused_naming_the_place(data_root, vqa_dataset, train, message):
    path = data_root / "unplannable.yaml"
    path.write_text(f"__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n{train}")
    with pytest.raises(DatasetError, match=message):
        blend_entries(path)


@pytest.mark.bad_input
def test_a_plan_never_overwrites_its_source(blend):
    before = blend.read_text()
    with pytest.raises(ConfigError, match="is the metadataset being planned"):
        write_planned(blend, blend, {p: 1.0 for p in WANTED})
    assert blend.read_text() == before


@pytest.mark.bad_input
def test_an_entry_without_tokens_cannot_be_planned():
    with pytest.raises(ConfigError, match="no tokens measured for b"):
        planned_weights({"a": 0.5, "b": 0.5}, {"a": 10.0, "b": 0.0})
