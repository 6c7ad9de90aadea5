"""Bad inputs, one table: every one is refused up front with a message that names the field,
the file or the plugin at fault, in one paragraph, with no traceback.

The rows cover config files (through ``energon-plugins validate``, the way a user meets
them, with what ``validate`` opens: tokenizer, components, dataset metadata, one sample with
``--deep``), config text (YAML that is malformed or hostile), datasets the encoder cannot read,
loader checkpoints, plugins and environment variables. The constructor's own table
(``tests/loading/test_datamodule_arguments.py``) covers bad keyword arguments.
"""

import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import energon_plugins
from energon_plugins.cli import cli
from energon_plugins.errors import EnergonPluginsError
from tests._dists import write_distribution
from tests._refusals import assert_refusal, unchanged

pytestmark = pytest.mark.bad_input

SEQ = 320


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer, data_root):
    """A folder with a good config (``good.yaml``), its tokenizer, and damaged datasets."""
    from energon_plugins.synthetic import write_dataset

    root = tmp_path_factory.mktemp("bad-inputs")
    tokenizer.save_pretrained(root / "tokenizer")
    (root / "empty-tokenizer").mkdir()
    good = {
        "path": str(vqa_dataset.path),
        "tokenizer": {"path": "tokenizer"},
        "seq_length": SEQ,
        "num_workers": 0,
        "micro_batch_size": 2,
    }
    (root / "good.yaml").write_text(yaml.safe_dump(good))

    # A dataset of a sample type no built-in encoder reads (Energon's ImageClassificationSample).
    text = root / "classification-samples"
    shutil.copytree(vqa_dataset.path, text)
    meta = text / ".nv-meta" / "dataset.yaml"
    meta.write_text(
        yaml.safe_dump(
            {
                "sample_type": {"__module__": "megatron.energon", "__class__": "ImageClassificationSample"},
                "field_map": {"image": "png", "label": "json"},
            }
        )
    )
    # Crude conversations in a format no cooker reads.
    crude = write_dataset(root / "crude-other", kind="chatml", num_samples=20, samples_per_shard=5)
    meta = Path(crude.path) / ".nv-meta" / "dataset.yaml"
    spec = yaml.safe_load(meta.read_text())
    spec["subflavors"] = {"format": "sharegpt-v9"}
    meta.write_text(yaml.safe_dump(spec))
    # A metadataset naming a folder that is not there, and one Energon cannot parse.
    (root / "missing.yaml").write_text(
        yaml.safe_dump(
            {
                "__module__": "megatron.energon",
                "__class__": "MetadatasetV2",
                "splits": {"train": {"path": "nowhere"}},
            }
        )
    )
    (root / "unparsable.yaml").write_text(
        yaml.safe_dump(
            {
                "__module__": "megatron.energon",
                "__class__": "Metadataset",
                "splits": {"train": {"path": str(vqa_dataset.path)}},
            }
        )
    )
    # A folder of shards that was never prepared.
    unprepared = root / "unprepared"
    unprepared.mkdir()
    for shard in Path(vqa_dataset.path).glob("*.tar"):
        shutil.copy(shard, unprepared)
    return root


def validate(site: Path, changes: dict | None = None, *extra: str, text: str | None = None):
    """Run ``energon-plugins validate`` on the good config with ``changes`` (dotted keys)."""
    config = yaml.safe_load((site / "good.yaml").read_text())
    for key, value in (changes or {}).items():
        *parents, last = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path = site / "case.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(config))
    dataset = site / str(yaml.safe_load((site / "good.yaml").read_text())["path"])
    with unchanged(path, site / "tokenizer", dataset):
        return CliRunner().invoke(cli, ["validate", str(path), *extra], catch_exceptions=False)


# -- config files through `validate` -----------------------------------------------------------

CONFIG_CASES = [
    # (id, dotted changes, extra CLI args, the key (and words) the message must name)
    ("unknown-key", {"seq_lenght": 4}, (), ["seq_lenght", "did you mean 'seq_length'"]),
    ("seq-length-bool", {"seq_length": True}, (), ["seq_length", "integer"]),
    ("seq-length-negative", {"seq_length": -5}, (), ["seq_length"]),
    ("micro-batch-string", {"micro_batch_size": "4"}, (), ["micro_batch_size"]),
    ("workers-float", {"num_workers": 1.5}, (), ["num_workers"]),
    (
        "global-not-multiple",
        {"micro_batch_size": 4, "global_batch_size": 6},
        (),
        ["global_batch_size", "multiple"],
    ),
    ("pin-memory-string", {"pin_memory": "yes"}, (), ["pin_memory"]),
    ("dataset-missing", {"path": "/no/such/dataset"}, (), ["path", "/no/such/dataset"]),
    ("dataset-unprepared", {"path": "unprepared"}, (), ["path", "energon prepare"]),
    ("tokenizer-missing", {"tokenizer.path": "no-tokenizer"}, (), ["tokenizer.path", "no-tokenizer"]),
    (
        "tokenizer-does-not-load",
        {"tokenizer.path": "empty-tokenizer"},
        (),
        ["tokenizer.path", "cannot load a tokenizer", "empty-tokenizer"],
    ),
    (
        "encoder-typo",
        {"task_encoder.name": "multimodel"},
        (),
        ["task_encoder.name", "did you mean 'multimodal'"],
    ),
    (
        "encoder-option-typo",
        {"task_encoder.options": {"truncaton": "drop"}},
        (),
        ["task_encoder.options.truncaton", "did you mean 'truncation'"],
    ),
    (
        "encoder-option-value",
        {"task_encoder.options": {"truncation": "sideways"}},
        (),
        ["task_encoder.options.truncation"],
    ),
    (
        "processor-typo",
        {"image_processor.name": "fast-clp"},
        (),
        ["image_processor.name", "did you mean 'fast-clip'"],
    ),
    (
        "packing-typo",
        {"packing": {"name": "first-fit-decreasng"}, "packing_buffer_size": 8},
        (),
        ["packing.name", "did you mean 'first-fit-decreasing'"],
    ),
    ("packing-without-buffer", {"packing": {"name": "ffd"}}, (), ["packing_buffer_size"]),
    ("buffer-without-packing", {"packing_buffer_size": 8}, (), ["packing"]),
    (
        "batch-format-typo",
        {"batch_format": {"name": "megatron-bridg"}},
        (),
        ["batch_format.name", "did you mean 'megatron-bridge'"],
    ),
    ("energon-key-unknown", {"energon": {"checkpoint_every_sec": 5}}, (), ["energon.checkpoint_every_sec"]),
    (
        "sample-config-typo",
        {"sample_config": {"image_tokn": "<image>"}},
        (),
        ["sample_config.image_tokn", "did you mean 'image_token'"],
    ),
    (
        "image-token-unknown-to-tokenizer",
        {"sample_config": {"image_token": "<img>"}},
        (),
        ["sample_config.image_token", "'<img>'"],
    ),
    (
        "seq-length-shorter-than-an-image",
        {"seq_length": 100},
        (),
        ["seq_length", "too small for one image", "256 image tokens"],
    ),
    (
        "dataset-of-another-sample-type",
        {"path": "classification-samples"},
        (),
        ["path", "ImageClassificationSample", "MultimodalTaskEncoder"],
    ),
    ("crude-format-without-cooker", {"path": "crude-other"}, (), ["path", "sharegpt-v9", "cookers"]),
    ("metadataset-naming-a-missing-folder", {"path": "missing.yaml"}, (), ["path", "nowhere"]),
    # The shortest one-image sample fits (269 tokens), the dataset's questions do not: the
    # default sample read names seq_length (--deep used to file it under path).
    (
        "sample-too-long",
        {"seq_length": 272, "task_encoder.options": {"truncation": "drop"}},
        (),
        ["seq_length", "are skipped", "too_long"],
    ),
    (
        "deep-sample-too-long",
        {"seq_length": 272, "task_encoder.options": {"truncation": "drop"}},
        ("--deep",),
        ["seq_length", "skipped", "too_long"],
    ),
]


@pytest.mark.parametrize(
    ("changes", "extra", "named"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES]
)
def test_a_bad_config_is_named_by_validate(site, changes, extra, named):
    result = validate(site, changes, *extra)
    assert result.exit_code == 1, result.output
    assert_refusal(result.output, *named)
    # The key the message names leads its line.
    first = named[0]
    assert any(line.strip().startswith(first) for line in result.output.splitlines()), result.output


def test_every_problem_is_reported_at_once(site):
    result = validate(site, {"seq_length": -1, "num_workers": "two", "task_encoder.name": "nope"})
    assert result.exit_code == 1
    assert_refusal(result.output, "3 errors", "seq_length", "num_workers", "task_encoder.name")


# -- config text ---------------------------------------------------------------------------------

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10) if prev else ', '.join(['x'] * 10)}]\n"
    for prev, name in zip([None, "a", "b", "c", "d"], ["a", "b", "c", "d", "e"])
)

TEXT_CASES = [
    ("yaml-syntax", "path: [unclosed\n", ["case.yaml", "not valid YAML", "(line "]),
    ("not-a-mapping", "- path\n- tokenizer\n", ["case.yaml", "mapping"]),
    ("empty", "", ["case.yaml", "empty"]),
    ("alias-bomb", BOMB, ["case.yaml", "anchors and aliases"]),
    ("deep-nesting", "x: " + "[" * 5000 + "]" * 5000 + "\n", ["case.yaml", "nests"]),
    ("nested-deeper-than-the-limit", "x: " + "[" * 100 + "]" * 100 + "\n", ["case.yaml", "64 levels"]),
]


@pytest.mark.parametrize(("text", "named"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES])
def test_bad_config_text_is_named(site, text, named):
    result = validate(site, text=text)
    assert result.exit_code == 1, result.output
    assert_refusal(result.output, *named)


def test_a_set_override_is_bounded_too(site):
    flow = "{" + BOMB.strip().replace("\n", ", ") + "}"
    result = CliRunner().invoke(
        cli, ["validate", "--quick", str(site / "good.yaml"), "--set", "energon=" + flow]
    )
    assert result.exit_code == 1
    assert_refusal(result.output, "--set energon", "anchors and aliases")


# -- datasets through the Python API ---------------------------------------------------------------


def _datamodule(path, tokenizer, clip_processor, **kwargs):
    return energon_plugins.EnergonMultiModalDataModule(
        str(path), tokenizer, clip_processor, seq_length=SEQ, num_workers=0, **kwargs
    )


DATASET_CASES = [
    (
        "another-sample-type",
        "classification-samples",
        {},
        ["classification-samples", "ImageClassificationSample", "MultimodalTaskEncoder"],
    ),
    ("crude-without-cooker", "crude-other", {}, ["crude-other", "sharegpt-v9", "cookers"]),
    ("metadataset-missing-folder", "missing.yaml", {}, ["missing.yaml", "nowhere"]),
    ("metadataset-energon-rejects", "unparsable.yaml", {}, ["unparsable.yaml", "Energon cannot load"]),
    (
        "llava-on-a-text-dataset",
        "classification-samples",
        {"task_encoder": "llava"},
        ["classification-samples", "ImageClassificationSample", "LlavaTaskEncoder"],
    ),
]


@pytest.mark.parametrize(
    ("where", "kwargs", "named"), [c[1:] for c in DATASET_CASES], ids=[c[0] for c in DATASET_CASES]
)
def test_a_dataset_the_encoder_cannot_read_fails_before_any_loader(
    site, tokenizer, clip_processor, where, kwargs, named
):
    built = []  # a missing blend leaf is refused by the constructor already (the blend check)
    with unchanged(site / where), pytest.raises(EnergonPluginsError) as info:
        built.append(_datamodule(site / where, tokenizer, clip_processor, **kwargs))
        built[0].train_dataloader()
    text = str(info.value)
    assert_refusal(text, *named)
    assert all(dm.train_dataloader_object is None for dm in built)


def test_unprepared_and_missing_datasets_fail_in_the_constructor(site, tokenizer, clip_processor):
    for where, named in (("unprepared", "energon prepare"), ("absent", "does not exist")):
        with pytest.raises(EnergonPluginsError) as info:
            _datamodule(site / where, tokenizer, clip_processor)
        assert_refusal(str(info.value), where, named)


# -- loader checkpoints ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_state(site, tmp_path_factory, tokenizer, clip_processor, vqa_dataset):
    folder = tmp_path_factory.mktemp("states")
    dm = _datamodule(vqa_dataset.path, tokenizer, clip_processor, micro_batch_size=2, shuffle_buffer_size=10)
    loader = dm.train_dataloader()
    for _ in range(2):
        next(loader)
    return dm.save_checkpoint(folder)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


CHECKPOINT_CASES = [
    ("truncated", lambda raw: raw[: len(raw) // 2], ["train_dataloader_dprank000.pt"]),
    ("not-a-zip", lambda raw: b"garbage" * 10, ["train_dataloader_dprank000.pt"]),
    ("code-in-the-pickle", None, ["train_dataloader_dprank000.pt", "system", "refusing"]),
]


@pytest.mark.parametrize(
    ("damage", "named"), [c[1:] for c in CHECKPOINT_CASES], ids=[c[0] for c in CHECKPOINT_CASES]
)
def test_a_damaged_or_foreign_state_file_is_named(
    saved_state, tmp_path, tokenizer, clip_processor, vqa_dataset, damage, named
):
    import torch

    target = tmp_path / saved_state.name
    if damage is None:
        torch.save({"dataloader_state_dict": _Evil()}, target)
    else:
        target.write_bytes(damage(saved_state.read_bytes()))
    dm = _datamodule(vqa_dataset.path, tokenizer, clip_processor, micro_batch_size=2, shuffle_buffer_size=10)
    with pytest.raises(EnergonPluginsError) as info:
        dm.load_checkpoint(tmp_path)
    assert_refusal(str(info.value), *named)


def test_a_state_of_another_setup_names_the_difference(saved_state, tokenizer, clip_processor, vqa_dataset):
    dm = _datamodule(vqa_dataset.path, tokenizer, clip_processor, micro_batch_size=4, shuffle_buffer_size=10)
    with pytest.raises(EnergonPluginsError) as info:
        dm.load_checkpoint(saved_state.parent)
    assert_refusal(str(info.value), "micro_batch_size", "saved 2", "now 4")


# -- plugins -----------------------------------------------------------------------------------


@pytest.fixture
def plugin_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    for var in ("ENERGON_PLUGINS_LOAD", "ENERGON_PLUGINS_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    return site


def _plugin(site, dist, pkg, body):
    """Write ``dist`` with package ``pkg`` (a name no other test uses: modules stay cached)."""
    write_distribution(
        site,
        dist,
        modules={f"{pkg}.plugin": "from energon_plugins import hookimpl\n" + body},
        entry_points={"p": f"{pkg}.plugin"},
    )


PLUGIN_CASES = [
    (
        "factory-returns-the-wrong-kind",
        "@hookimpl\ndef register_task_encoders(register):\n    register('wrongkind', lambda o, c: 42)\n",
        lambda r: r.create("task_encoder", "wrongkind"),
        ["task_encoder 'wrongkind'", "energon-plugin-bad", "not a megatron.energon TaskEncoder"],
    ),
    (
        "factory-raises",
        "@hookimpl\ndef register_image_processors(register):\n"
        "    def build(o, c):\n        raise RuntimeError('no GPU here')\n    register('boom', build)\n",
        lambda r: r.create("image_processor", "boom"),
        ["image_processor 'boom'", "energon-plugin-bad", "no GPU here"],
    ),
    (
        "factory-string-does-not-import",
        "@hookimpl\ndef register_packing_strategies(register):\n    register('ghost', 'nowhere_pkg.mod:build')\n",
        lambda r: r.create("packing_strategy", "ghost"),
        ["packing_strategy 'ghost'", "energon-plugin-bad", "nowhere_pkg.mod:build"],
    ),
    (
        "options-not-a-mapping",
        "from pydantic import BaseModel\nclass O(BaseModel):\n    x: int = 1\n"
        "@hookimpl\ndef register_image_processors(register):\n    register('opt', lambda o, c: len, options=O)\n",
        lambda r: r.create("image_processor", "opt", options=[1, 2]),
        ["image_processor 'opt'", "must be a mapping"],
    ),
]


@pytest.mark.parametrize(
    ("body", "action", "named"), [c[1:] for c in PLUGIN_CASES], ids=[c[0] for c in PLUGIN_CASES]
)
def test_a_broken_plugin_is_named(plugin_site, body, action, named):
    _plugin(plugin_site, "energon-plugin-bad", f"bad_inputs_{abs(hash(body))}", body)
    registry = energon_plugins.load_registry()
    with pytest.raises(EnergonPluginsError) as info:
        action(registry)
    assert_refusal(str(info.value), *named)


def test_a_plugin_claiming_a_default_name_does_not_break_defaults(plugin_site, site):
    """A third-party plugin that registers ``multimodal``, ``hf`` or ``megatron-bridge``: the
    defaults still select the built-ins, and ``list`` shows the clash."""
    _plugin(
        plugin_site,
        "energon-plugin-greedy",
        "greedy_pkg",
        "@hookimpl\ndef register_task_encoders(register):\n    register('multimodal', len)\n"
        "@hookimpl\ndef register_image_processors(register):\n    register('hf', len)\n"
        "@hookimpl\ndef register_batch_formats(register):\n    register('megatron-bridge', len)\n",
    )
    with energon_plugins.use_registry(energon_plugins.load_registry()) as registry:
        result = validate(site, {}, "--quick")
        assert result.exit_code == 0, result.output
        rows = {(r.kind, r.name, r.distribution): r.status for r in registry.available()}
        assert rows[("task_encoder", "multimodal", "energon-plugin-greedy")] == "conflict"
        assert rows[("image_processor", "hf", "energon-plugins")] == "conflict"
        assert rows[("batch_format", "megatron-bridge", "energon-plugins")] == "conflict"


# -- environment variables -------------------------------------------------------------------------

ENV_CASES = [
    (
        "typo-in-the-variable",
        "ENERGON_PLUGINS_DISABLED",
        "x",
        ["ENERGON_PLUGINS_DISABLED", "ENERGON_PLUGINS_DISABLE"],
    ),
    (
        "typo-in-a-distribution",
        "ENERGON_PLUGINS_LOAD",
        "energon-plugin-lava",
        ["ENERGON_PLUGINS_LOAD", "energon-plugin-lava", "energon-plugin-llava"],
    ),
    ("core-disabled", "ENERGON_PLUGINS_DISABLE", "energon-plugins", ["ENERGON_PLUGINS_DISABLE", "core"]),
]


@pytest.mark.parametrize(
    ("variable", "value", "named"), [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES]
)
def test_a_bad_environment_variable_is_named_by_every_verb(monkeypatch, variable, value, named):
    monkeypatch.setenv(variable, value)
    energon_plugins.reset_registry()
    try:
        result = CliRunner().invoke(cli, ["list"], catch_exceptions=False)
    finally:
        monkeypatch.delenv(variable)
        energon_plugins.reset_registry()
    assert result.exit_code == 1
    assert_refusal(result.output, *named)
