"""The ``cache_pool`` setting and media from an auxiliary source (issue 29), on real stores.

A polylithic dataset (``tests/_aux_media.py``): crude LLaVA conversations that name their image,
and the images in a separate store: a local folder (``filesystem://``), or another bucket of a
real S3 server (moto) under another storage profile (``filesystem+msc://``). Read through the
datamodule, its batches equal those of the monolithic twin (the images as tar parts); with the
cache pool they are the same again, the media are fetched to the local cache directory (never
more bytes at once than the cap) and read from there (hits), also in the later batches. ``bench``
shows the hit rate. Bad settings are refused naming the field, by the config and the constructor.
"""

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

import energon_plugins
from energon_plugins.cli import cli
from energon_plugins.config import check_config
from energon_plugins.errors import ConfigError
from energon_plugins.loading.cache_pool import cache_pool_stats, loader_cache_pool
from energon_plugins.testing.object_store import SECRET_KEY, msc_config_text
from tests._aux_media import metadataset, write_polylithic
from tests._refusals import assert_refusal

CAP_GB = 2000 / 1024**3
"""A cap of 2,000 bytes, split over the training and validation loaders: the training loader
may hold about three of the test images (about 340 bytes each) while eight samples wait in its
shuffle buffer, so fetches wait for room."""


@pytest.fixture(scope="module")
def polylithic(data_root):
    """The polylithic dataset (``conversations/``, ``media/``) and its monolithic twin."""
    root = data_root / "polylithic"
    return root, write_polylithic(root)


@pytest.fixture(scope="module")
def remote(polylithic, local_s3, tmp_path_factory):
    """``(metadataset, environment)``: the conversations in one bucket (profile ``s3test``), the
    images in another, reached through a second profile ``media`` whose base path is that bucket."""
    root, _ = polylithic
    here = tmp_path_factory.mktemp("remote-aux")
    conversations, media = local_s3.new_bucket("conv"), local_s3.new_bucket("media")
    local_s3.upload_folder(root / "conversations", conversations, "conversations")
    local_s3.upload_folder(root / "media", media, "images")
    config = here / "msc.yaml"
    config.write_text(
        msc_config_text({"s3test": (local_s3.endpoint, ""), "media": (local_s3.endpoint, media)})
    )
    blend = metadataset(
        here / "blend.yaml",
        local_s3.url(conversations, "conversations"),
        {"media": "filesystem+msc://media/images"},
    )
    return blend, {**local_s3.env(), "MSC_CONFIG": str(config)}


@pytest.fixture
def storage(remote):
    """The remote environment set for the test (the storage client's profiles read again)."""
    from energon_plugins.testing.object_store import storage_environment

    _, env = remote
    with storage_environment(env):
        yield


def datamodule(path, tokenizer, processor, **values):
    settings = {
        "seq_length": 512,
        "micro_batch_size": 2,
        "num_workers": 0,
        "shuffle_buffer_size": 8,
        **values,
    }
    return energon_plugins.EnergonMultiModalDataModule(
        path=str(path), tokenizer=tokenizer, image_processor=processor, **settings
    )


def first_batches(module, count):
    iterator = iter(module.train_dataloader())
    return [next(iterator) for _ in range(count)]


def assert_same(left, right, where="batch"):
    """Equal tensors, keys, lists and fields, all the way down."""
    if isinstance(left, torch.Tensor):
        assert isinstance(right, torch.Tensor) and torch.equal(left, right), where
    elif isinstance(left, dict):
        assert left.keys() == right.keys(), where
        for key in left:
            assert_same(left[key], right[key], f"{where}[{key!r}]")
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right), where
        for index, (a, b) in enumerate(zip(left, right)):
            assert_same(a, b, f"{where}[{index}]")
    elif dataclasses.is_dataclass(left):
        assert type(left) is type(right), where
        for field in dataclasses.fields(left):
            assert_same(getattr(left, field.name), getattr(right, field.name), f"{where}.{field.name}")
    else:
        assert left == right, where


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# ------------------------------------------------------------------ aux media
def test_images_from_a_local_aux_folder_give_the_monolithic_batches(
    polylithic, tokenizer, small_clip_processor
):
    root, twin = polylithic
    blend = metadataset(root / "local.yaml", "conversations", {"media": "filesystem://media"})
    aux = first_batches(datamodule(blend, tokenizer, small_clip_processor), 4)
    parts = first_batches(datamodule(twin.path, tokenizer, small_clip_processor), 4)
    # the same rows; each names its own source (the leaf as the metadataset writes it)
    assert all(source == "conversations" for batch in aux for source in batch["__sources__"])
    assert_same(
        [{k: v for k, v in batch.items() if k != "__sources__"} for batch in aux],
        [{k: v for k, v in batch.items() if k != "__sources__"} for batch in parts],
    )
    assert all(batch["visual_inputs"].pixel_values.shape[0] == 2 for batch in aux)  # one image each


def test_a_remote_dataset_reads_the_same_batches_with_the_cache_pool(
    remote, storage, tokenizer, small_clip_processor, tmp_path
):
    blend, _ = remote
    plain = first_batches(datamodule(blend, tokenizer, small_clip_processor), 4)
    cache = tmp_path / "cache"
    module = datamodule(
        blend, tokenizer, small_clip_processor, cache_pool={"path": str(cache), "max_size_gb": CAP_GB}
    )
    iterator = iter(module.train_dataloader())
    cached = [next(iterator) for _ in range(4)]
    assert_same(cached, plain)

    first = cache_pool_stats(module)
    # 2 loader processes (training and validation, no workers): the training share is half
    assert first.cap_bytes == int(CAP_GB * 1024**3 / 2)
    assert first.hits >= 1 and first.reads == 8  # each batch's 2 images went through the pool
    assert 0 < first.peak_bytes <= first.cap_bytes
    assert folder_bytes(cache) <= first.cap_bytes
    for _ in range(8):  # the later batches: the cache fills and empties again, under the cap
        next(iterator)
    later = cache_pool_stats(module)
    assert later.reads == 24 and later.hits > first.hits
    assert later.peak_bytes <= later.cap_bytes < later.cached_bytes  # far more went through than it holds
    assert folder_bytes(cache) <= later.cap_bytes


def test_an_energon_cache_pool_object_is_used_as_it_is(vqa_dataset, tokenizer, tmp_path):
    from megatron.energon.cache import FileStoreCachePool

    pool = FileStoreCachePool(parent_cache_dir=tmp_path, max_cache_size_gbytes=0.01)
    module = datamodule(vqa_dataset.path, tokenizer, None, cache_pool=pool)
    assert loader_cache_pool(module, "train") is pool and loader_cache_pool(module, "val") is pool
    assert cache_pool_stats(module) is None  # only the pool the datamodule builds counts


def test_bench_shows_the_cache_hit_rate(remote, storage, tokenizer, tmp_path):
    blend, _ = remote
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    config = {
        "path": str(blend),
        "tokenizer": {"path": str(tmp_path / "tokenizer")},
        "image_processor": {
            "name": "hf",
            "options": {"kwargs": {"size": {"shortest_edge": 28}, "crop_size": {"height": 28, "width": 28}}},
        },
        "seq_length": 512,
        "micro_batch_size": 2,
        "num_workers": 1,  # the counts come back from the worker process
        "shuffle_buffer_size": 8,
        "cache_pool": {"path": str(tmp_path / "cache"), "max_size_gb": CAP_GB * 10},
    }
    (tmp_path / "bench.yaml").write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(
        cli, ["bench", str(tmp_path / "bench.yaml"), "--batches", "4"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    [row] = [line for line in result.output.splitlines() if "cache pool hit rate" in line]
    assert "%" in row and "media reads" in row and "held" in row
    assert SECRET_KEY not in result.output


# ------------------------------------------------------------------ bad settings
BAD = [
    pytest.param({"max_size_gb": 0}, "cache_pool.max_size_gb", "greater than 0", id="cap-zero"),
    pytest.param({"max_size_gb": -2}, "cache_pool.max_size_gb", "greater than 0", id="cap-negative"),
    pytest.param({"max_size_gb": 1e9}, "cache_pool.max_size_gb", "65536", id="cap-too-large"),
    pytest.param({"max_size_gb": "10"}, "cache_pool.max_size_gb", "number", id="cap-text"),
    pytest.param({"max_size_gb": float("nan")}, "cache_pool.max_size_gb", "finite", id="cap-nan"),
    pytest.param({"max_size_gb": ...}, "cache_pool.max_size_gb", "missing", id="cap-missing"),
    pytest.param(
        {"prefetch_threads": 0},
        "cache_pool.prefetch_threads",
        "greater than or equal to 1",
        id="threads-zero",
    ),
    pytest.param({"prefetch_threads": 2.5}, "cache_pool.prefetch_threads", "integer", id="threads-float"),
    pytest.param({"max_size": 3}, "cache_pool.max_size", "did you mean 'max_size_gb'", id="unknown-key"),
    pytest.param({"path": ""}, "cache_pool.path", "", id="path-empty"),
    pytest.param({"path": "{file}"}, "cache_pool.path", "is not a directory", id="path-a-file"),
    pytest.param({"path": "{file}/cache"}, "cache_pool.path", "cannot be created", id="path-under-a-file"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("change", "field", "reason"), BAD)
def test_bad_cache_settings_are_refused_naming_the_field(
    vqa_dataset, tokenizer, tmp_path, change, field, reason
):
    (tmp_path / "file").write_text("not a directory")
    value = {"path": str(tmp_path / "cache"), "max_size_gb": 1.0, **change}
    value = {
        k: (v.format(file=tmp_path / "file") if isinstance(v, str) else v)
        for k, v in value.items()
        if v is not ...
    }
    _, issues = check_config(
        {"path": str(vqa_dataset.path), "tokenizer": {"path": "tok"}, "cache_pool": value}, check_paths=False
    )
    assert [issue.path for issue in issues] == [field], issues
    assert reason in issues[0].message, issues
    with pytest.raises(ConfigError) as info:
        datamodule(vqa_dataset.path, tokenizer, None, cache_pool=value)
    assert_refusal(str(info.value), field, reason)
    assert not (tmp_path / "cache").exists()  # nothing created for a refused setting


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("value", "field", "reason"),
    [
        pytest.param("/tmp/cache", "cache_pool", "expected {path: DIR, max_size_gb: N}", id="a-path"),
        pytest.param(42, "cache_pool", "got int", id="a-number"),
        pytest.param(object, "cache_pool", "the class object itself", id="a-class"),
    ],
)
def test_a_cache_pool_of_the_wrong_type_is_refused(vqa_dataset, tokenizer, value, field, reason):
    with pytest.raises(ConfigError) as info:
        datamodule(vqa_dataset.path, tokenizer, None, cache_pool=value)
    assert_refusal(str(info.value), field, reason)


@pytest.mark.bad_input
def test_cache_pool_in_the_energon_section_points_to_the_setting(vqa_dataset):
    _, issues = check_config(
        {
            "path": str(vqa_dataset.path),
            "tokenizer": {"path": "tok"},
            "energon": {"cache_pool": {"path": "x"}},
        },
        check_paths=False,
    )
    assert [(i.path, "top-level key 'cache_pool'" in i.message) for i in issues] == [
        ("energon.cache_pool", True)
    ]
