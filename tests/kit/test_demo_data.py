"""The demo dataset generator, read back through Energon's real prepare index and loader."""

from __future__ import annotations

import itertools
import json
import pathlib
import tarfile

import pytest
import torch
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    WorkerConfig,
    basic_sample_keys,
    edataclass,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    stateless,
)

from energon_plugins.synthetic import (
    KINDS,
    DatasetInfo,
    default_cache_dir,
    write_dataset,
    write_demo_datasets,
)


@edataclass
class CrudeView(Sample):
    """A cooked crude sample: the parsed JSON part and the decoded images in part order."""

    meta: dict
    images: list


@stateless
def _cook(sample: dict) -> CrudeView:
    images = (
        [sample["png"]]
        if "png" in sample
        else [sample[f"{i}.png"] for i in range(sum(1 for k in sample if k.endswith(".png")))]
    )
    meta = sample["json"]
    meta["conversations"]  # a cooker needs it: a sample without it fails here, as in a plugin
    return CrudeView(**basic_sample_keys(sample), meta=meta, images=images)


class _PassEncoder(DefaultTaskEncoder):
    """Default encoder plus a pass-through cooker, so crude kinds can be read too."""

    cookers = [Cooker(_cook)]


def _worker_config(errors: list | None = None) -> WorkerConfig:
    kwargs = {}
    if errors is not None:
        kwargs["global_error_handler"] = lambda exc, sample, sources: errors.append((exc, sample, sources))
    return WorkerConfig(rank=0, world_size=1, num_workers=0, **kwargs)


def _read_split(path, split, errors=None) -> list:
    dataset = get_val_dataset(
        path,
        split_part=split,
        worker_config=_worker_config(errors),
        batch_size=None,
        task_encoder=_PassEncoder(),
    )
    return list(get_loader(dataset))


def _images(sample) -> list[torch.Tensor]:
    if hasattr(sample, "image"):
        return [sample.image]
    if hasattr(sample, "sequence"):
        return [x for x in sample.sequence if isinstance(x, torch.Tensor)]
    return list(sample.images)


def _check_fields(kind: str, sample, record: dict) -> None:
    images = _images(sample)
    assert [list(img.shape) for img in images] == [[3, h, w] for w, h in record["image_sizes"]]
    for img, scene in zip(images, record["scenes"]):
        assert img.dtype == torch.float32
        assert 0.0 <= float(img.min()) and float(img.max()) <= 1.0
        # the corner pixel shows the background colour
        corner = [round(float(v) * 255) for v in img[:, 0, 0]]
        assert corner == scene["background_rgb"]
    if kind == "vqa":
        assert sample.context == record["context"]
        assert sample.answers == record["answers"]
    elif kind == "captioning":
        assert sample.caption == record["caption"]
    elif kind == "interleaved":
        texts = [x for x in sample.sequence if isinstance(x, str)]
        assert texts == [item["text"] for item in record["sequence"] if "text" in item]
        kinds = ["text" if isinstance(x, str) else "image" for x in sample.sequence]
        assert kinds == ["text" if "text" in item else "image" for item in record["sequence"]]
    else:
        assert sample.meta == {"conversations": record["conversations"]}
        assert sample.__subflavors__ == {"format": kind}
        tags = sum(t["value"].count("<image>") for t in record["conversations"] if t["from"] == "human")
        assert tags == len(images)
        assert [t["from"] for t in record["conversations"]] == ["human", "gpt"] * (
            len(record["conversations"]) // 2
        )


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_reads_back_through_energon(tmp_path, kind):
    image_size = ((16, 20), (40, 36)) if kind == "chatml" else (24, 24)
    info = write_dataset(
        tmp_path / kind, kind=kind, num_samples=30, samples_per_shard=5, image_size=image_size, seed=3
    )
    assert isinstance(info, DatasetInfo) and set(info.split_keys) == {"train", "val"}
    assert sorted(k for keys in info.split_keys.values() for k in keys) == sorted(info.samples)
    assert len(info.shards) == 6 and all(s.exists() for s in info.shards)
    meta = tmp_path / kind / ".nv-meta"
    for name in ("dataset.yaml", "split.yaml", ".info.json", "index.sqlite"):
        assert (meta / name).exists(), name
    for split, keys in info.split_keys.items():
        samples = _read_split(info.path, split)
        arrived = [s.__key__ for s in samples]
        assert arrived == keys  # every key exactly once, in shard order
        for sample in samples:
            _check_fields(kind, sample, info.samples[sample.__key__])
    if kind == "chatml":
        sizes = {tuple(s) for r in info.samples.values() for s in r["image_sizes"]}
        assert len(sizes) > 5, "mixed sizes were requested"
        assert max(len(r["image_sizes"]) for r in info.samples.values()) > 1


def test_vqa_answers_describe_the_image(tmp_path):
    info = write_dataset(tmp_path / "vqa", num_samples=40, seed=1)
    questions = set()
    for key, record in info.samples.items():
        scene = record["scenes"][0]
        question, answer = record["context"], record["answers"][0]
        questions.add(question.split()[0])
        if question.startswith("How many"):
            assert answer == str(scene["count"])
        elif "background" in question:
            assert answer == scene["background"]
        else:
            assert answer == scene["color"]
    assert questions == {"How", "What"}


def test_savable_train_loader_reads_the_train_split(tmp_path):
    info = write_dataset(tmp_path / "ds", num_samples=20, samples_per_shard=5)
    dataset = get_train_dataset(
        info.path,
        worker_config=_worker_config(),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    loader = get_savable_loader(dataset)
    keys = [s.__key__ for s in itertools.islice(loader, 30)]
    assert set(keys) == set(info.split_keys["train"])


def test_same_arguments_reuse_what_is_on_disk(tmp_path):
    first = write_dataset(tmp_path / "ds", num_samples=20, samples_per_shard=5, seed=7)
    mtime = first.shards[0].stat().st_mtime_ns
    again = write_dataset(tmp_path / "ds", num_samples=20, samples_per_shard=5, seed=7)
    assert again == first
    assert first.shards[0].stat().st_mtime_ns == mtime
    with pytest.raises(FileExistsError, match="overwrite"):
        write_dataset(tmp_path / "ds", num_samples=20, samples_per_shard=5, seed=8)
    other = write_dataset(tmp_path / "ds", num_samples=20, samples_per_shard=5, seed=8, overwrite=True)
    assert other.samples != first.samples


def test_refuses_to_delete_a_foreign_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="refusing"):
        write_dataset(tmp_path, num_samples=20, samples_per_shard=5, overwrite=True)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_same_seed_same_content(tmp_path):
    a = write_dataset(tmp_path / "a", kind="chatml", num_samples=20, samples_per_shard=5, seed=5)
    b = write_dataset(tmp_path / "b", kind="chatml", num_samples=20, samples_per_shard=5, seed=5)
    assert a.samples == b.samples
    assert [_members(s) for s in a.shards] == [_members(s) for s in b.shards]


def _members(shard: pathlib.Path) -> list[tuple[str, bytes]]:
    with tarfile.open(shard) as tar:  # tar headers carry mtimes, so compare names and contents
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]


@pytest.mark.parametrize("kind", ["vqa", "captioning", "chatml", "interleaved"])
def test_corrupt_keys_are_exactly_the_failures(tmp_path, kind):
    info = write_dataset(
        tmp_path / kind,
        kind=kind,
        num_samples=60,
        samples_per_shard=10,
        split_ratio=[("train", 0.5), ("val", 0.5)],
        seed=2,
        corrupt={"image": 3, "json": 2, "missing_field": 2, "truncated_shard": 1},
    )
    assert {k: len(v) for k, v in info.corrupt_keys.items()} == {
        "image": 3,
        "json": 2,
        "missing_field": 2,
        "truncated_shard": 5,
    }
    bad = {k for keys in info.corrupt_keys.values() for k in keys}
    assert len(bad) == 12
    errors: list = []
    arrived = []
    truncated_split = None
    for split in info.split_keys:
        loader = get_loader(
            get_val_dataset(
                info.path,
                split_part=split,
                worker_config=_worker_config(errors),
                batch_size=None,
                task_encoder=_PassEncoder(),
            )
        )
        try:
            for sample in loader:
                arrived.append(sample.__key__)
                _check_fields(kind, sample, info.samples[sample.__key__])
        except ValueError as exc:
            # Energon does not skip a truncated shard: the read error ends the iteration.
            assert "Unexpected end of tar file" in str(exc) and info.shards[-1].name in str(exc)
            truncated_split = split
    assert truncated_split == "val"  # the last shard, read last in the unshuffled val split
    assert sorted(arrived) == sorted(info.good_keys)
    assert len(arrived) == len(set(arrived)) == 48
    bad = {k for reason in ("image", "json", "missing_field") for k in info.corrupt_keys[reason]}
    # Energon's error handler saw exactly the image/json/missing_field corrupt samples (the
    # handler gets the raw sample, a RawSampleData in 7.4.1 whose data holds the key, or the
    # crude dict when the cooker failed; `sources` is None for raw samples).
    assert sorted(_failed_key(sample) for _, sample, _ in errors) == sorted(bad)


def _failed_key(sample) -> str:
    if isinstance(sample, dict):
        return sample["__key__"]
    data = getattr(sample, "data", None)
    assert data, f"cannot find the key of failed sample {sample!r}"
    return data[0]["__key__"]


def test_truncated_shard_is_really_shorter(tmp_path):
    info = write_dataset(
        tmp_path / "ds",
        num_samples=20,
        samples_per_shard=10,
        split_ratio=[("train", 0.5), ("val", 0.5)],
        corrupt={"truncated_shard": 1},
    )
    assert info.shards[1].stat().st_size < info.shards[0].stat().st_size / 1.5
    counts = json.loads((info.path / ".nv-meta" / ".info.json").read_text())["shard_counts"]
    assert counts == {"shard-000000.tar": 10, "shard-000001.tar": 10}  # index made before the cut


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_samples=10, samples_per_shard=10), r"split\(s\) 'train', 'val' would be empty|'val'"),
        (dict(num_samples=40, samples_per_shard=10, split_ratio=[("train", 0.1), ("val", 0.9)]), "'train'"),
        (dict(kind="audio"), "kind"),
        (dict(corrupt={"pixels": 1}), "corrupt"),
        (dict(image_size=(2, 2)), "image_size"),
        (dict(num_samples=20, samples_per_shard=10, corrupt={"truncated_shard": 2}), "truncated_shard"),
        (
            dict(
                num_samples=20,
                samples_per_shard=10,
                split_ratio=[("train", 0.5), ("val", 0.5)],
                corrupt={"image": 8, "json": 3, "truncated_shard": 1},
            ),
            "only 10 samples",
        ),
    ],
)
def test_bad_arguments_raise_clear_errors(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        write_dataset(tmp_path / "ds", **kwargs)
    assert not (tmp_path / "ds").exists()


def test_split_too_small_names_the_split_and_counts(tmp_path):
    with pytest.raises(ValueError) as excinfo:
        write_dataset(
            tmp_path / "ds",
            num_samples=30,
            samples_per_shard=10,
            split_ratio=[("train", 0.8), ("val", 0.1), ("test", 0.1)],
        )
    message = str(excinfo.value)
    assert "'val'" in message and "'test'" in message and "3 shard(s)" in message


def test_three_splits_when_enough_shards(tmp_path):
    info = write_dataset(
        tmp_path / "ds",
        num_samples=100,
        samples_per_shard=10,
        split_ratio=[("train", 0.8), ("val", 0.1), ("test", 0.1)],
    )
    assert {k: len(v) for k, v in info.split_keys.items()} == {"train": 80, "val": 10, "test": 10}
    assert [s.__key__ for s in _read_split(info.path, "test")] == info.split_keys["test"]


def test_demo_metadataset_blends_both(tmp_path):
    info = write_demo_datasets(tmp_path, num_samples=40)
    assert info.path == tmp_path.resolve() / "demo.yaml"
    val = _read_split(info.path, "val")
    assert sorted(s.__key__ for s in val) == sorted(info.split_keys["val"])
    assert {type(s).__name__ for s in val} == {"VQASample", "CaptioningSample"}
    train = get_train_dataset(
        info.path,
        worker_config=_worker_config(),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )
    seen = {type(s).__name__ for s in itertools.islice(get_loader(train), 40)}
    assert seen == {"VQASample", "CaptioningSample"}
    stamp = (tmp_path / "demo-stamp.json").stat().st_mtime_ns
    again = write_demo_datasets(tmp_path, num_samples=40)
    assert again == info and (tmp_path / "demo-stamp.json").stat().st_mtime_ns == stamp


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ENERGON_PLUGINS_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("ENERGON_PLUGINS_CACHE")
    assert default_cache_dir() == pathlib.Path.home() / ".cache" / "energon-plugins"
