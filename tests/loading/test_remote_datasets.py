"""Datasets on object storage: read over HTTP from a real S3 server, equal to the local copy.

The session's ``local_s3`` fixture runs moto's S3 server as a separate process on 127.0.0.1;
each test uploads the prepared datasets to its own bucket and reads them through the datamodule
with ``msc://s3test/BUCKET/...`` paths (Energon's storage client, nothing patched). The batches
must equal those read from the local folder: keys, tokens, labels, masks and pixels, with 0 and
2 workers, packing on, and for a blend of two remote leaves. Faults go through
:class:`~energon_plugins.testing.object_store.DelayProxy`: a dropped or stalled connection ends
in one :class:`~energon_plugins.RemoteStorageError` naming the object, within the profile's
timeouts and retries, and the last saved state resumes exactly once the store answers again.
"""

import time

import pytest
import yaml

import energon_plugins
from energon_plugins import RemoteStorageError
from energon_plugins.testing import batch_differences
from energon_plugins.testing.object_store import SECRET_KEY, DelayProxy

SEQ = 300
BATCHES = 6


def make_dm(path, tokenizer, processor, *, workers=0, packing=False, **kwargs):
    args = dict(seq_length=SEQ, micro_batch_size=2, num_workers=workers, shuffle_buffer_size=10)
    if packing:
        args.update(
            packing=energon_plugins.create("packing_strategy", "first-fit-decreasing", {"carry_over": True}),
            packing_buffer_size=6,
            seq_length=128,
            task_encoder={"name": "multimodal", "options": {"image_tokens": 6}},
        )
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(path), tokenizer, processor, **args)


def take(loader, n):
    iterator = iter(loader)
    return [next(iterator) for _ in range(n)]


def without_sources(batch):
    """The batch without ``__sources__``, which names the remote or the local path."""
    return {key: value for key, value in batch.items() if key != "__sources__"}


def assert_same(got, want):
    """Equal batches; ``got``'s rows name remote sources where ``want``'s name local ones."""
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a["__keys__"] == b["__keys__"]
        assert batch_differences(without_sources(a), without_sources(b)) == []
        assert len(a["__sources__"]) == len(b["__sources__"])


@pytest.fixture(scope="module")
def remote_vqa(local_s3, vqa_dataset):
    """The session's VQA dataset uploaded to a bucket of its own: (msc:// URL, bucket)."""
    bucket = local_s3.new_bucket("vqa")
    local_s3.upload_folder(vqa_dataset.path, bucket, "vqa")
    return local_s3.url(bucket, "vqa"), bucket


@pytest.mark.parametrize(
    ("workers", "packing"),
    [(0, False), (0, True), pytest.param(2, False, marks=pytest.mark.slow), (2, True)],
    ids=["w0", "w0-packing", "w2", "w2-packing"],
)
def test_remote_dataset_gives_the_local_batches(
    local_s3, remote_vqa, vqa_dataset, tokenizer, clip_processor, workers, packing
):
    url, _ = remote_vqa
    local = take(
        make_dm(
            vqa_dataset.path, tokenizer, clip_processor, workers=workers, packing=packing
        ).train_dataloader(),
        BATCHES,
    )
    with local_s3.environment():
        remote = take(
            make_dm(url, tokenizer, clip_processor, workers=workers, packing=packing).train_dataloader(),
            BATCHES,
        )
    assert_same(remote, local)
    assert {source for batch in remote for row in batch["__sources__"] for source in row.split(",")} == {url}
    if packing:  # several samples per row
        assert any("," in key for batch in remote for key in batch["__keys__"])


def test_remote_validation_split_is_the_local_one(
    local_s3, remote_vqa, vqa_dataset, tokenizer, clip_processor
):
    url, _ = remote_vqa
    local = list(make_dm(vqa_dataset.path, tokenizer, clip_processor).val_dataloader().one_pass())
    with local_s3.environment():
        remote = list(make_dm(url, tokenizer, clip_processor).val_dataloader().one_pass())
    assert len(remote) == len(local) > 0
    assert_same(remote, local)


def _blend(tmp_path, name, first, second):
    path = tmp_path / name
    path.write_text(
        yaml.safe_dump(
            {
                "__module__": "megatron.energon",
                "__class__": "MetadatasetV2",
                "splits": {
                    "train": {
                        "blend": [{"weight": 1, "path": str(first)}, {"weight": 2, "path": str(second)}]
                    },
                    "val": {"path": str(first)},
                },
            }
        )
    )
    return path


def test_blend_of_two_remote_leaves_equals_the_local_blend(
    tmp_path, local_s3, vqa_dataset, captioning_dataset, tokenizer, clip_processor
):
    bucket = local_s3.new_bucket("blend")
    local_s3.upload_folder(vqa_dataset.path, bucket, "vqa")
    local_s3.upload_folder(captioning_dataset.path, bucket, "captioning")
    local_yaml = _blend(tmp_path, "local.yaml", vqa_dataset.path, captioning_dataset.path)
    remote_yaml = _blend(
        tmp_path, "remote.yaml", local_s3.url(bucket, "vqa"), local_s3.url(bucket, "captioning")
    )
    local = take(make_dm(local_yaml, tokenizer, clip_processor).train_dataloader(), 10)
    with local_s3.environment():
        remote = take(make_dm(remote_yaml, tokenizer, clip_processor).train_dataloader(), 10)
    assert_same(remote, local)
    keys = {key.split("-")[0] for batch in remote for key in batch["__keys__"]}
    assert keys == {"vqa", "captioning"}, keys


# ------------------------------------------------------------------------------------ faults


@pytest.fixture()
def proxied(local_s3, remote_vqa):
    """A profile ``s3slow`` that reaches the server through a :class:`DelayProxy`, with a
    short read timeout and two attempts 0.1 s apart."""
    proxy = DelayProxy(local_s3.port)
    saved = local_s3.config_path.read_text()
    local_s3.write_config(
        {local_s3.profile: (local_s3.endpoint, ""), "s3slow": (proxy.endpoint, "")},
        retry={"attempts": 2, "delay": 0.1, "backoff_multiplier": 2.0},
        read_timeout=1.5,
    )
    _, bucket = remote_vqa
    try:
        yield proxy, f"msc://s3slow/{bucket}/vqa"
    finally:
        proxy.close()
        local_s3.config_path.write_text(saved)


@pytest.mark.parametrize("fault", ["drop", pytest.param("stall", marks=pytest.mark.slow)])
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)], ids=["w0", "w2"])
def test_a_failing_store_stops_with_a_clear_error_and_resumes_exactly(
    local_s3, proxied, vqa_dataset, tokenizer, clip_processor, fault, workers
):
    proxy, url = proxied
    want = take(make_dm(vqa_dataset.path, tokenizer, clip_processor, workers=workers).train_dataloader(), 14)
    with local_s3.environment():
        loader = make_dm(url, tokenizer, clip_processor, workers=workers).train_dataloader()
        iterator = iter(loader)
        got = [next(iterator) for _ in range(3)]
        state = loader.save_state()
        if fault == "drop":
            proxy.drop = True
        else:
            proxy.delay = 30.0
        start = time.monotonic()
        with pytest.raises(RemoteStorageError) as raised:
            for _ in range(40):  # the whole epoch is more than the prefetched batches
                next(iterator)
        waited = time.monotonic() - start
        loader.close()
        message = str(raised.value)
        assert raised.value.object_key is not None and raised.value.object_key in message
        assert raised.value.object_key.split("/")[0] in url
        assert "retry" in message and "read_timeout" in message
        assert SECRET_KEY not in message and "Traceback" not in message
        # two attempts of at most ~1.5 s reads (botocore may retry each), 0.1-1.1 s backoff
        assert waited < 30, waited

        proxy.drop, proxy.delay = False, 0.0
        resumed = make_dm(url, tokenizer, clip_processor, workers=workers).train_dataloader()
        resumed.restore_state(state)
        got += take(resumed, 11)
    assert_same(got, want)


def test_a_storage_error_is_never_skipped_as_a_bad_sample(local_s3, proxied, tokenizer, clip_processor):
    """Under on_error='skip' a dropped connection still stops the loader (nothing is lost)."""
    proxy, url = proxied
    with local_s3.environment():
        loader = make_dm(
            url,
            tokenizer,
            clip_processor,
            task_encoder={"name": "multimodal", "options": {"on_error": "skip"}},
        ).train_dataloader()
        iterator = iter(loader)
        next(iterator)
        proxy.drop = True
        with pytest.raises(RemoteStorageError):
            for _ in range(40):
                next(iterator)
        assert loader.skip_counts() == {}
