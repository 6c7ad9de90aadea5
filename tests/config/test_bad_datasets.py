"""Bad dataset folders and metadatasets, one table: what ``validate`` says about them.

Each row points a good config at a damaged copy of the session's VQA dataset (or a metadataset
over one) and runs ``energon-plugins validate``: ``--quick`` where the config check alone sees
the damage (a missing ``.nv-meta``, an empty or missing split, a deleted or truncated shard, a
metadataset class Energon does not have), the full check where samples must be read (a
``field_map`` that finds nothing, a sample type that is not there). The refusal exits 1, names
the dataset, the file or the shard and the key, shows no traceback and changes nothing on disk.
"""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.config._bad_site import make_site, refused, run, write_case

META = ".nv-meta"


def _edit_yaml(path: Path, change: Callable[[dict], None]) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


def _empty(folder: Path) -> None:
    shutil.rmtree(folder)
    folder.mkdir()


DAMAGES: dict[str, Callable[[Path], None]] = {
    "no-meta": lambda d: shutil.rmtree(d / META),
    "empty-folder": _empty,
    "no-split-file": lambda d: (d / META / "split.yaml").unlink(),
    "split-not-yaml": lambda d: (d / META / "split.yaml").write_text("split_parts: [unclosed\n"),
    "split-without-parts": lambda d: (d / META / "split.yaml").write_text("exclude: []\n"),
    "split-train-empty": lambda d: _edit_yaml(
        d / META / "split.yaml", lambda s: s["split_parts"].update(train=[])
    ),
    "deleted-shard": lambda d: (d / "shard-000003.tar").unlink(),
    "deleted-shards": lambda d: [(d / f"shard-00000{i}.tar").unlink() for i in range(5)],
    "deleted-val-shard": lambda d: (d / "shard-000010.tar").unlink(),
    "truncated-shard": lambda d: (d / "shard-000002.tar").write_bytes(
        (d / "shard-000002.tar").read_bytes()[:9000]
    ),
    "index-not-json": lambda d: (d / META / ".info.json").write_text("{not json"),
    "index-without-counts": lambda d: (d / META / ".info.json").write_text('{"energon_version": "7.4.1"}'),
    "empty-train-shards": lambda d: (d / META / ".info.json").write_text(
        json.dumps({"shard_counts": {f"shard-{i:06d}.tar": 0 if i < 9 else 5 for i in range(12)}})
    ),
    "train-only": lambda d: _edit_yaml(d / META / "split.yaml", lambda s: s["split_parts"].pop("val")),
    "dataset-yaml-not-yaml": lambda d: (d / META / "dataset.yaml").write_text("sample_type: [unclosed\n"),
    "no-such-sample-type": lambda d: _edit_yaml(
        d / META / "dataset.yaml", lambda m: m["sample_type"].update({"__class__": "NoSuchSample"})
    ),
    "field-map-json-key": lambda d: _edit_yaml(
        d / META / "dataset.yaml", lambda m: m["field_map"].update(context="json[nope]")
    ),
    "field-map-part": lambda d: _edit_yaml(
        d / META / "dataset.yaml", lambda m: m["field_map"].update(image="jpg")
    ),
    "field-map-unknown-field": lambda d: _edit_yaml(
        d / META / "dataset.yaml", lambda m: m["field_map"].update(contxt=m["field_map"].pop("context"))
    ),
    "field-map-required-field": lambda d: _edit_yaml(
        d / META / "dataset.yaml", lambda m: m["field_map"].pop("context")
    ),
}
"""Damaged copies of the VQA dataset (12 shards of 5 samples, 9 train and 3 val), by name."""


def _metadataset(leaf: str, **top: object) -> dict:
    return {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {"train": {"path": leaf}, "val": {"path": leaf}},
        **top,
    }


METADATASETS: dict[str, object] = {
    "no-such-class.yaml": _metadataset("good", __class__="NoSuchMetadataset"),
    "no-such-module.yaml": _metadataset("good", __module__="no_such_package.metadata", __class__="Blend"),
    "class-without-module.yaml": {k: v for k, v in _metadataset("good").items() if k != "__module__"},
    "class-a-number.yaml": _metadataset("good", __class__=5),
    "no-splits.yaml": {"__module__": "megatron.energon", "__class__": "MetadatasetV2"},
    "splits-a-list.yaml": {**_metadataset("good"), "splits": ["train", "val"]},
    "no-train-split.yaml": {**_metadataset("good"), "splits": {"val": {"path": "good"}}},
    "missing-nested.yaml": _metadataset("absent-inner.yaml"),
    "leaf-deleted-shard.yaml": _metadataset("deleted-shard"),
    "not-yaml.yaml": "splits: {train: [unclosed\n",
    "empty.yaml": "",
}
"""Metadatasets beside the damaged copies (``good`` is an undamaged copy)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer) -> Path:
    root = make_site(tmp_path_factory.mktemp("bad-datasets"), vqa_dataset.path, tokenizer)
    data = root / "data"
    for name in ["good", *DAMAGES]:
        shutil.copytree(vqa_dataset.path, data / name)
        if name in DAMAGES:
            DAMAGES[name](data / name)
    for name, content in METADATASETS.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content)
        (data / name).write_text(text, encoding="utf-8")
    (data / "notes.txt").write_text("not a dataset\n", encoding="utf-8")
    return root


def validate_on(site: Path, dataset: str, *names: str, extra=(), changes=None, quick=True):
    """``validate`` of the good config with ``path`` set to ``data/DATASET``: refused, naming ``names``."""
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config["path"] = str(site / "data" / dataset)
    config["tokenizer"]["path"] = str(site / "tokenizer")
    config.update(changes or {})
    case = write_case(site, config)
    args = ["validate", case, *(["--quick"] if quick else []), *extra]
    return refused(args, *names, watch=(site / "data", site / "tokenizer"))


QUICK = [
    # (dataset under data/, extra config keys, what the message names)
    pytest.param("no-meta", {}, ["no-meta", "energon prepare"], id="no-nv-meta"),
    pytest.param("empty-folder", {}, ["empty-folder", ".nv-meta/dataset.yaml"], id="empty-folder"),
    pytest.param("no-split-file", {}, ["no-split-file", "split.yaml is missing"], id="no-split-file"),
    pytest.param("split-not-yaml", {}, ["split.yaml", "not valid YAML"], id="split-not-yaml"),
    pytest.param("split-without-parts", {}, ["split.yaml", "split_parts"], id="split-without-parts"),
    pytest.param("split-train-empty", {}, ["split-train-empty", "no 'train' split"], id="empty-train-split"),
    pytest.param("deleted-shard", {}, ["path", "shard-000003.tar", "missing"], id="deleted-shard"),
    pytest.param("deleted-shards", {}, ["path", "shard-000000.tar", "and 2 more"], id="five-deleted-shards"),
    pytest.param("deleted-val-shard", {}, ["path", "shard-000010.tar", "missing"], id="deleted-val-shard"),
    pytest.param(
        "truncated-shard", {}, ["path", "shard-000002.tar", "cut short", "9000 bytes"], id="truncated-shard"
    ),
    pytest.param("index-not-json", {}, ["path", ".info.json", "cannot read"], id="index-not-json"),
    pytest.param(
        "index-without-counts", {}, ["path", ".info.json", "shard_counts"], id="index-without-counts"
    ),
    pytest.param(
        "empty-train-shards", {}, ["path", "'train' split holds no samples"], id="train-shards-empty"
    ),
    pytest.param(
        "train-only",
        {"val_batches_per_evaluation": 4},
        ["path", "no 'val' split", "val_batches_per_evaluation"],
        id="no-val-split-but-val-batches",
    ),
    pytest.param(
        "train-only",
        {"validation_task_encoder": {"name": "llava"}},
        ["path", "no 'val' split", "validation_task_encoder"],
        id="no-val-split-but-val-encoder",
    ),
    pytest.param(
        "train-only",
        {"num_val_workers": 0},
        ["path", "no 'val' split", "num_val_workers"],
        id="no-val-split-but-val-workers",
    ),
    pytest.param("notes.txt", {}, ["notes.txt", "not an Energon dataset"], id="a-text-file"),
    pytest.param("absent", {}, ["path", "absent", "does not exist"], id="absent"),
    # metadatasets
    pytest.param(
        "no-such-class.yaml",
        {},
        ["no-such-class.yaml", "'NoSuchMetadataset'", "MetadatasetV2"],
        id="meta-unknown-class",
    ),
    pytest.param(
        "no-such-module.yaml",
        {},
        ["no-such-module.yaml", "'no_such_package.metadata'", "not installed"],
        id="meta-unknown-module",
    ),
    pytest.param(
        "class-without-module.yaml",
        {},
        ["class-without-module.yaml", "__module__"],
        id="meta-class-without-module",
    ),
    pytest.param("class-a-number.yaml", {}, ["class-a-number.yaml", "__class__ 5"], id="meta-class-a-number"),
    pytest.param("no-splits.yaml", {}, ["no-splits.yaml", "'splits' mapping"], id="meta-no-splits"),
    pytest.param(
        "splits-a-list.yaml", {}, ["splits-a-list.yaml", "'splits' mapping"], id="meta-splits-a-list"
    ),
    pytest.param(
        "no-train-split.yaml", {}, ["no-train-split.yaml", "no 'train' split"], id="meta-no-train-split"
    ),
    pytest.param(
        "missing-nested.yaml",
        {},
        ["missing-nested.yaml", "absent-inner.yaml", "does not exist"],
        id="meta-missing-nested",
    ),
    pytest.param(
        "leaf-deleted-shard.yaml",
        {},
        ["path", "deleted-shard", "shard-000003.tar"],
        id="meta-leaf-deleted-shard",
    ),
    pytest.param("not-yaml.yaml", {}, ["not-yaml.yaml", "not valid YAML"], id="meta-not-yaml"),
    pytest.param("empty.yaml", {}, ["empty.yaml", "not an Energon metadataset"], id="meta-empty"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("dataset", "changes", "named"), QUICK)
def test_a_damaged_dataset_is_named_by_the_config_check(site, dataset, changes, named):
    validate_on(site, dataset, *named, changes=changes)


FULL = [
    # (dataset, extra validate arguments, what the message names): samples are read
    pytest.param(
        "dataset-yaml-not-yaml", (), ["path", "dataset.yaml", "cannot read"], id="dataset-yaml-not-yaml"
    ),
    pytest.param(
        "no-such-sample-type", (), ["path", "NoSuchSample", "dataset.yaml"], id="no-such-sample-type"
    ),
    pytest.param(
        "field-map-json-key",
        ("--deep",),
        ["path", "field_map", "field-map-json-key", "json[nope]", "question"],
        id="field-map-json-key-deep",
    ),
    pytest.param("field-map-part", (), ["path", "field_map", "'jpg'", "png"], id="field-map-missing-part"),
    pytest.param(
        "field-map-unknown-field",
        (),
        ["path", "field_map", "contxt", "VQASample"],
        id="field-map-unknown-field",
    ),
    pytest.param(
        "field-map-required-field",
        (),
        ["path", "field_map", "context", "requires"],
        id="field-map-required-field",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("dataset", "extra", "named"), FULL)
def test_a_dataset_whose_samples_cannot_be_read_is_named_in_one_paragraph(site, dataset, extra, named):
    result = validate_on(site, dataset, *named, extra=extra, quick=False)
    assert len(result.output.splitlines()) <= 4, result.output  # not one line per sample
    assert "Except " not in result.output


@pytest.mark.bad_input
def test_preview_names_a_field_map_that_finds_nothing(site):
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config.update(path=str(site / "data" / "field-map-json-key"), tokenizer={"path": str(site / "tokenizer")})
    case = write_case(site, config)
    refused(
        ["preview", case, "-n", "1"], "field_map", "json[nope]", watch=(site / "data", site / "tokenizer")
    )


# -- what is not refused -------------------------------------------------------------------------


def test_a_dataset_without_val_split_is_a_warning_when_validation_is_not_asked_for(site):
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config.update(path=str(site / "data" / "train-only"), tokenizer={"path": str(site / "tokenizer")})
    result = run(["validate", "--quick", write_case(site, config)])
    assert result.exit_code == 0, result.output
    assert "warning: path:" in result.output
    assert "no 'val' split" in result.output


VERBS = [
    # (arguments after the config, the dataset, what the message names): what the battery ran
    pytest.param(
        ["preview", "-n", "1"],
        "no-such-class.yaml",
        ["no-such-class.yaml", "'NoSuchMetadataset'"],
        id="preview-unknown-metadataset-class",
    ),
    pytest.param(
        ["bench", "--batches", "1"],
        "no-such-class.yaml",
        ["no-such-class.yaml", "'NoSuchMetadataset'"],
        id="bench-unknown-metadataset-class",
    ),
    pytest.param(
        ["validate"],
        "no-such-class.yaml",
        ["no-such-class.yaml", "'NoSuchMetadataset'"],
        id="validate-unknown-metadataset-class",
    ),
    pytest.param(
        ["validate", "--deep"],
        "deleted-shard",
        ["path", "shard-000003.tar", "missing"],
        id="deep-deleted-shard",
    ),
    pytest.param(
        ["bench", "--batches", "1"],
        "deleted-shard",
        ["path", "shard-000003.tar", "missing"],
        id="bench-deleted-shard",
    ),
    pytest.param(
        ["preview", "-n", "1"],
        "truncated-shard",
        ["path", "shard-000002.tar", "cut short"],
        id="preview-truncated-shard",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("verb", "dataset", "named"), VERBS)
def test_every_verb_refuses_a_broken_dataset_before_loading_it(site, verb, dataset, named):
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config.update(path=str(site / "data" / dataset), tokenizer={"path": str(site / "tokenizer")})
    case = write_case(site, config)
    result = refused([verb[0], case, *verb[1:]], *named, watch=(site / "data", site / "tokenizer"))
    assert "Traceback" not in result.output


def test_the_metadataset_classes_the_check_knows_are_energons():
    """``ENERGON_METADATASET_CLASSES`` (the import-light check's list) is what the installed
    ``megatron.energon`` has: its ``DatasetLoaderInterface`` classes named ``Metadataset*``."""
    import megatron.energon as energon
    from megatron.energon.metadataset.loader_interface import DatasetLoaderInterface

    from energon_plugins.config.dataset_check import ENERGON_METADATASET_CLASSES

    found = {
        name
        for name in dir(energon)
        if name.startswith("Metadataset")
        and isinstance(getattr(energon, name), type)
        and issubclass(getattr(energon, name), DatasetLoaderInterface)
    }
    assert found == set(ENERGON_METADATASET_CLASSES)
