"""Blends a metadataset must not have (issue 30, item 4): what ``validate`` and the datamodule say.

Each row writes a metadataset over the session's real Energon datasets (VQA, captioning,
interleaved, train-only, and an emptied or OCR-typed copy of the VQA one) and runs
``energon-plugins validate --quick`` or builds the datamodule: the same dataset blended twice
(directly or through two nested YAML files: Energon would read it twice with the same order),
an empty leaf, a weight or ``repetitions`` that is not a number above 0, a nested metadataset
that includes itself, a leaf of a sample type the encoder does not read. The refusal names the
leaf and its place in the YAML, shows no traceback and changes nothing on disk.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from energon_plugins.errors import DatasetError
from tests.config._bad_site import make_site, refused, run, write_case

META = ".nv-meta"


def _blend(*entries: dict, kind: str = "blend", val: bool = True) -> dict:
    splits: dict = {"train": {kind: list(entries)}}
    if val:
        splits["val"] = {"path": "vqa"}
    return {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": splits}


def _leaf(path: str, weight: object = 1, **more: object) -> dict:
    return {"weight": weight, "path": path, **more}


METADATASETS: dict[str, object] = {
    "good.yaml": _blend(_leaf("vqa", 2), _leaf("captioning"), _leaf("interleaved", 0.5), _leaf("train-only")),
    "twice.yaml": _blend(_leaf("vqa", 2), _leaf("captioning"), _leaf("./vqa/", 3)),
    "twice-epochized.yaml": _blend(
        {"repetitions": 2, "path": "vqa"}, {"repetitions": 1, "path": "vqa"}, kind="blend_epochized"
    ),
    "inner-a.yaml": _blend(_leaf("captioning"), _leaf("vqa"), val=False),
    "inner-b.yaml": _blend(_leaf("interleaved"), _leaf("../data/vqa"), val=False),
    "nested-twice.yaml": _blend(_leaf("inner-a.yaml"), _leaf("inner-b.yaml", 2)),
    "other-subflavors.yaml": _blend(_leaf("vqa"), _leaf("vqa", subflavors={"source": "second"})),
    "other-split-part.yaml": _blend(_leaf("vqa"), _leaf("vqa", split_part="val")),
    "empty-leaf.yaml": _blend(_leaf("vqa"), _leaf("empty-shards")),
    "no-train-leaf.yaml": _blend(_leaf("vqa"), _leaf("val-only")),
    "weight-zero.yaml": _blend(_leaf("vqa"), _leaf("captioning", 0)),
    "weight-negative.yaml": _blend(_leaf("vqa"), _leaf("captioning", -1)),
    "weight-text.yaml": _blend(_leaf("vqa"), _leaf("captioning", "heavy")),
    "weight-nan.yaml": "splits:\n  train:\n    blend:\n      - {weight: .nan, path: vqa}\n",
    "weight-inf.yaml": "splits:\n  train:\n    blend:\n      - {weight: .inf, path: vqa}\n",
    "weight-bool.yaml": _blend(_leaf("vqa", True)),
    "repetitions-zero.yaml": _blend({"repetitions": 0, "path": "vqa"}, kind="blend_epochized"),
    "inner-bad-weight.yaml": _blend(_leaf("captioning", -2), val=False),
    "nested-bad-weight.yaml": _blend(_leaf("vqa"), _leaf("inner-bad-weight.yaml")),
    "loop.yaml": _blend(_leaf("vqa"), _leaf("loop.yaml")),
    "inner-no-train.yaml": {"splits": {"val": {"path": "vqa"}}},
    "nested-no-split.yaml": _blend(_leaf("vqa"), _leaf("inner-no-train.yaml")),
    "missing-leaf.yaml": _blend(_leaf("vqa"), _leaf("gone")),
    "val-twice.yaml": {
        "splits": {
            "train": {"path": "vqa"},
            "val": {"blend": [_leaf("vqa", split_part="val"), _leaf("vqa")]},
        }
    },
    "ocr-leaf.yaml": _blend(_leaf("vqa"), _leaf("ocr")),
}
"""Metadatasets written beside the datasets under ``data/``."""


@pytest.fixture(scope="module")
def site(
    tmp_path_factory, vqa_dataset, captioning_dataset, interleaved_dataset, train_only_dataset, tokenizer
):
    root = make_site(tmp_path_factory.mktemp("blend-checks"), vqa_dataset.path, tokenizer)
    data = root / "data"
    data.mkdir()
    for name, dataset in {
        "vqa": vqa_dataset,
        "captioning": captioning_dataset,
        "interleaved": interleaved_dataset,
        "train-only": train_only_dataset,
    }.items():
        (data / name).symlink_to(dataset.path, target_is_directory=True)
    empty = data / "empty-shards"
    shutil.copytree(vqa_dataset.path, empty)
    index = json.loads((empty / META / ".info.json").read_text())
    index["shard_counts"] = {name: 0 for name in index["shard_counts"]}
    (empty / META / ".info.json").write_text(json.dumps(index))
    val_only = data / "val-only"
    shutil.copytree(vqa_dataset.path, val_only)
    split = yaml.safe_load((val_only / META / "split.yaml").read_text())
    split["split_parts"].pop("train")
    (val_only / META / "split.yaml").write_text(yaml.safe_dump(split))
    ocr = data / "ocr"
    shutil.copytree(vqa_dataset.path, ocr)
    described = (ocr / META / "dataset.yaml").read_text().replace("VQASample", "ImageClassificationSample")
    (ocr / META / "dataset.yaml").write_text(described)
    for name, content in METADATASETS.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        (data / name).write_text(text, encoding="utf-8")
    return root


def _config(site: Path, dataset: str) -> Path:
    config = yaml.safe_load((site / "good.yaml").read_text(encoding="utf-8"))
    config.update(path=str(site / "data" / dataset), tokenizer={"path": str(site / "tokenizer")})
    return write_case(site, config, name=f"{dataset}.config.yaml")


def _watched(site: Path) -> tuple[Path, ...]:
    return (site / "data" / "empty-shards", site / "data" / "val-only", *(site / "data").glob("*.yaml"))


QUICK = [
    # (metadataset under data/, what the refusal names)
    pytest.param(
        "twice.yaml",
        [
            "path",
            "twice.yaml: splits.train.blend[0]",
            "twice.yaml: splits.train.blend[2]",
            "2 times",
            "same order",
            "higher weight",
        ],
        id="same-leaf-twice",
    ),
    pytest.param(
        "twice-epochized.yaml",
        ["splits.train.blend_epochized[0]", "splits.train.blend_epochized[1]", "higher repetitions"],
        id="same-leaf-twice-epochized",
    ),
    pytest.param(
        "nested-twice.yaml",
        [
            "nested-twice.yaml: splits.train.blend[0] -> inner-a.yaml: splits.train.blend[1]",
            "nested-twice.yaml: splits.train.blend[1] -> inner-b.yaml: splits.train.blend[1]",
            "same order",
        ],
        id="same-leaf-through-two-nested-files",
    ),
    pytest.param(
        "val-twice.yaml",
        ["val-twice.yaml: splits.val.blend[0]", "val-twice.yaml: splits.val.blend[1]", "'val' split"],
        id="same-leaf-twice-in-val",
    ),
    pytest.param(
        "empty-leaf.yaml",
        ["empty-leaf.yaml: splits.train.blend[1]", "empty leaf", "empty-shards", "hold no samples"],
        id="empty-leaf",
    ),
    pytest.param(
        "no-train-leaf.yaml",
        ["no-train-leaf.yaml: splits.train.blend[1]", "empty leaf", "val-only", "no 'train' split"],
        id="leaf-without-the-split",
    ),
    pytest.param(
        "weight-zero.yaml", ["splits.train.blend[1] (captioning)", "weight 0", "above 0"], id="weight-zero"
    ),
    pytest.param(
        "weight-negative.yaml",
        ["splits.train.blend[1] (captioning)", "weight -1", "above 0"],
        id="weight-negative",
    ),
    pytest.param("weight-text.yaml", ["splits.train.blend[1]", "'heavy'", "not a number"], id="weight-text"),
    pytest.param(
        "weight-nan.yaml", ["splits.train.blend[0] (vqa)", "nan", "not a finite number"], id="weight-nan"
    ),
    pytest.param(
        "weight-inf.yaml", ["splits.train.blend[0] (vqa)", "inf", "not a finite number"], id="weight-inf"
    ),
    pytest.param(
        "weight-bool.yaml", ["splits.train.blend[0]", "weight True", "not a number"], id="weight-bool"
    ),
    pytest.param(
        "repetitions-zero.yaml", ["splits.train.blend_epochized[0]", "repetitions 0"], id="repetitions-zero"
    ),
    pytest.param(
        "nested-bad-weight.yaml",
        [
            "nested-bad-weight.yaml: splits.train.blend[1] -> inner-bad-weight.yaml: splits.train.blend[0]",
            "weight -2",
        ],
        id="bad-weight-in-nested-file",
    ),
    pytest.param(
        "loop.yaml", ["loop.yaml: splits.train.blend[1]", "includes itself"], id="metadataset-cycle"
    ),
    pytest.param(
        "nested-no-split.yaml",
        ["nested-no-split.yaml: splits.train.blend[1]", "inner-no-train.yaml", "no 'train' split"],
        id="nested-file-without-the-split",
    ),
    pytest.param(
        "missing-leaf.yaml",
        ["missing-leaf.yaml: splits.train.blend[1]", "'gone'", "does not exist"],
        id="missing-leaf",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("dataset", "named"), QUICK)
def test_validate_names_the_bad_leaf_and_its_place(site, dataset, named):
    refused(["validate", "--quick", _config(site, dataset)], *named, watch=_watched(site))


CONSTRUCTED = [
    pytest.param("twice.yaml", ["splits.train.blend[0]", "splits.train.blend[2]", "same order"], id="twice"),
    pytest.param("nested-twice.yaml", ["inner-a.yaml", "inner-b.yaml", "same order"], id="nested-twice"),
    pytest.param("empty-leaf.yaml", ["splits.train.blend[1]", "empty leaf"], id="empty-leaf"),
    pytest.param("weight-negative.yaml", ["splits.train.blend[1]", "weight -1"], id="weight-negative"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("dataset", "named"), CONSTRUCTED)
def test_the_datamodule_refuses_the_bad_blend_when_built(site, tokenizer, clip_processor, dataset, named):
    from energon_plugins import EnergonMultiModalDataModule

    with pytest.raises(DatasetError) as raised:
        EnergonMultiModalDataModule(
            path=str(site / "data" / dataset),
            tokenizer=tokenizer,
            image_processor=clip_processor,
            seq_length=320,
            micro_batch_size=2,
            num_workers=0,
        )
    for name in named:
        assert name in str(raised.value), (name, str(raised.value))


@pytest.mark.bad_input
def test_a_leaf_the_encoder_cannot_read_is_named_by_its_place(site):
    refused(
        ["validate", _config(site, "ocr-leaf.yaml")],
        "ocr-leaf.yaml: splits.train.blend[1]",
        "holds ImageClassificationSample samples",
        "does not read",
        watch=_watched(site),
    )


# -- what is not refused -------------------------------------------------------------------------


def test_a_blend_of_four_datasets_of_different_sample_types_passes(site):
    result = run(["validate", _config(site, "good.yaml")])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


@pytest.mark.parametrize("dataset", ["other-subflavors.yaml", "other-split-part.yaml"])
def test_the_same_folder_read_differently_is_not_a_duplicate(site, dataset):
    result = run(["validate", "--quick", _config(site, dataset)])
    assert result.exit_code == 0, result.output


def test_the_walk_names_every_leaf_with_its_place_and_split(site):
    from energon_plugins.config.blend_walk import walk_split

    walk = walk_split(site / "data" / "nested-twice.yaml", "train")
    assert not walk.problems
    assert [(leaf.place, Path(leaf.path).name, leaf.split_part) for leaf in walk.leaves] == [
        (
            "nested-twice.yaml: splits.train.blend[0] -> inner-a.yaml: splits.train.blend[0]",
            "captioning",
            "train",
        ),
        ("nested-twice.yaml: splits.train.blend[0] -> inner-a.yaml: splits.train.blend[1]", "vqa", "train"),
        (
            "nested-twice.yaml: splits.train.blend[1] -> inner-b.yaml: splits.train.blend[0]",
            "interleaved",
            "train",
        ),
        ("nested-twice.yaml: splits.train.blend[1] -> inner-b.yaml: splits.train.blend[1]", "vqa", "train"),
    ]
