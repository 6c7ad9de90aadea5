"""Loader state files on object storage (issue 29): ``save_checkpoint`` / ``load_checkpoint`` and
the rank-file functions at ``msc://`` folders of a real S3 server (moto, a separate process:
``local_s3``), written atomically and read through the same restricted reader and size caps as
local files.

A state saved to the store after two batches restores into a fresh datamodule whose next batches
equal an uninterrupted run's; Megatron-Bridge's checkpoint layout is found on the store as on a
disk; a failed save (an exception while serializing, a connection cut by a proxy) leaves the
previous state readable and no partial object; an oversized object is refused after a ``HEAD``,
never downloaded; a missing file or folder is refused as a local one is; errors name the URL and
the profile, never the secret key.
"""

import pickle
from pathlib import Path

import pytest
import torch
import yaml

from energon_plugins.loading import safe_load
from energon_plugins.loading.checkpoint import (
    StateFileError,
    load_loader_state,
    save_loader_state,
    state_path,
)
from energon_plugins.loading.rank_files import find_rank_files, read_rank_states
from energon_plugins.loading.state_store import StateStoreError
from energon_plugins.testing.compare import batch_differences
from energon_plugins.testing.object_store import SECRET_KEY, DelayProxy, LocalS3
from tests.loading._rank_runs import ITERATION, builder, read_run, write_bridge_checkpoint

RANK0 = "train_dataloader_dprank000.pt"
BEFORE, AFTER = 2, 3
"""Batches read before the save, and compared after the restore."""


@pytest.fixture(scope="module")
def make(vqa_dataset, tokenizer):
    return builder(vqa_dataset.path, tokenizer)


@pytest.fixture
def store(local_s3):
    """``(server, a fresh bucket)`` with the storage client's environment set."""
    bucket = local_s3.new_bucket("state")
    with local_s3.environment():
        yield local_s3, bucket


def batches(loader, count):
    return [next(loader) for _ in range(count)]


# ----------------------------------------------------------------------------- exact resume
def test_a_state_saved_to_the_store_resumes_exactly(make, store):
    s3, bucket = store
    url = s3.url(bucket, "run/ckpt")
    straight = make(0, 1)
    try:
        expected = batches(straight.train_dataloader(), BEFORE + AFTER)[BEFORE:]
    finally:
        straight.close()
    first = make(0, 1)
    try:
        batches(first.train_dataloader(), BEFORE)
        path = first.save_checkpoint(url)
    finally:
        first.close()
    assert str(path) == f"{url}/{RANK0}"
    assert s3.keys(bucket) == [f"run/ckpt/{RANK0}"], "one object, no temporary key left"
    resumed = make(0, 1)
    try:
        resumed.load_checkpoint(url)
        got = batches(resumed.train_dataloader(), AFTER)
    finally:
        resumed.close()
    assert batch_differences(got, expected) == []


# ----------------------------------------------------------------------------- Bridge layout
ITER = f"iter_{ITERATION:07d}"


@pytest.fixture(scope="module")
def two_ranks(make, local_s3):
    """Two DP ranks read two batches each and ``save_checkpoint`` to Megatron-Bridge's layout on
    the store (``ROOT/energon/iter_NNNNNNN``, Bridge's default ``dataloader_save``, with Bridge's
    tracker in ``ROOT``); ``(bucket, ROOT's URL, the two states as save_state() returned them)``."""
    bucket = local_s3.new_bucket("bridge")
    root = local_s3.url(bucket, "checkpoints")
    states = []
    with local_s3.environment():
        for rank in range(2):
            module = make(rank, 2)
            try:
                batches(module.train_dataloader(), BEFORE)
                module.save_checkpoint(f"{root}/energon/{ITER}")
                states.append(pickle.loads(pickle.dumps(module.train_dataloader().save_state())))
            finally:
                module.close()
    tracker = "checkpoints/latest_checkpointed_iteration.txt"
    local_s3.client().put_object(Bucket=bucket, Key=tracker, Body=f"{ITERATION}\n".encode())
    return bucket, root, states


def test_save_checkpoint_writes_the_bridge_layout_on_the_store(local_s3, two_ranks):
    bucket, root, _ = two_ranks
    assert local_s3.keys(bucket) == [
        "checkpoints/energon/iter_0000100/train_dataloader_dprank000.pt",
        "checkpoints/energon/iter_0000100/train_dataloader_dprank001.pt",
        "checkpoints/latest_checkpointed_iteration.txt",
    ], "the rank files and the tracker, no temporary key"
    with local_s3.environment():
        found = find_rank_files(root)
        assert (found.origin, found.iteration, str(found.folder)) == (
            "megatron-bridge",
            ITERATION,
            f"{root}/energon/{ITER}",
        )
        ranks = read_rank_states(found)
    assert [fingerprint["dp_rank"] for fingerprint in ranks.fingerprints] == [0, 1]


def test_a_bridge_written_checkpoint_on_the_store_restores_exactly(make, store, two_ranks, tmp_path):
    """Files as Bridge itself writes them (no format, no fingerprint), uploaded to the store:
    ``load_checkpoint(ROOT)`` on one rank reads what the list of both states restores."""
    s3, bucket = store
    _, _, states = two_ranks
    write_bridge_checkpoint(tmp_path / "checkpoints", states)
    s3.upload_folder(tmp_path / "checkpoints", bucket, "checkpoints")
    root = s3.url(bucket, "checkpoints")
    expected = read_run(make, 1, lambda dm: dm.train_dataloader().restore_state(states))
    assert read_run(make, 1, lambda dm: dm.load_checkpoint(root)) == expected


# ----------------------------------------------------------------------------- atomicity
class Unpicklable:
    """Fails ``torch.save`` part-way through a state (after other fields were serialized)."""

    def __reduce__(self):
        raise RuntimeError("serialization failed part-way")


def test_a_save_that_fails_while_serializing_stores_nothing(store):
    s3, bucket = store
    url = s3.url(bucket, "ckpt")
    save_loader_state(url, {"step": 1}, dp_rank=0, fingerprint={"a": 1})
    before = s3.get(bucket, f"ckpt/{RANK0}")
    with pytest.raises(RuntimeError, match="part-way"):
        save_loader_state(url, {"step": 2, "z": Unpicklable()}, dp_rank=0, fingerprint={"a": 1})
    assert s3.keys(bucket) == [f"ckpt/{RANK0}"]
    assert s3.get(bucket, f"ckpt/{RANK0}") == before
    assert load_loader_state(url, dp_rank=0, fingerprint={"a": 1}) == {"step": 1}


@pytest.fixture
def cut_store(local_s3, tmp_path):
    """``(server, bucket, proxy)``: profile ``s3cut`` reaches the server through a proxy that can
    drop every connection (one attempt, no retries), profile ``s3test`` directly."""
    bucket = local_s3.new_bucket("cut")
    handle = LocalS3(root=tmp_path, port=local_s3.port, process=local_s3.process)  # own config file
    with DelayProxy(local_s3.port) as proxy:
        handle.write_config(
            {"s3test": (local_s3.endpoint, ""), "s3cut": (proxy.endpoint, "")},
            retry={"attempts": 1, "delay": 0.0, "backoff_multiplier": 1.0},
        )
        config = yaml.safe_load(handle.config_path.read_text())
        config["profiles"]["s3cut"]["storage_provider"]["options"]["retries"] = {"max_attempts": 1}
        handle.config_path.write_text(yaml.safe_dump(config))
        with handle.environment():
            yield local_s3, bucket, proxy


def test_a_save_cut_off_by_the_network_leaves_the_previous_state(cut_store):
    s3, bucket, proxy = cut_store
    url = f"msc://s3cut/{bucket}/ckpt"
    save_loader_state(url, {"step": 1}, dp_rank=0, fingerprint={})
    proxy.drop = True
    with pytest.raises(StateStoreError) as info:
        save_loader_state(url, {"step": 2}, dp_rank=0, fingerprint={})
    message = str(info.value)
    assert f"cannot write {url}/{RANK0}" in message and "'s3cut'" in message
    assert SECRET_KEY not in message
    assert s3.keys(bucket) == [f"ckpt/{RANK0}"]
    assert load_loader_state(f"msc://s3test/{bucket}/ckpt", dp_rank=0) == {"step": 1}


# ----------------------------------------------------------------------------- size cap
def test_an_oversized_object_is_refused_without_downloading_it(store, monkeypatch):
    s3, bucket = store
    url = s3.url(bucket, "ckpt")
    save_loader_state(url, {"big": torch.zeros(4096, dtype=torch.uint8)}, dp_rank=0, fingerprint={})
    size = len(s3.get(bucket, f"ckpt/{RANK0}"))
    log = s3.root / "moto_server.log"
    seen = len(log.read_bytes())
    monkeypatch.setattr(safe_load, "MAX_STATE_FILE_BYTES", 4000)
    with pytest.raises(StateFileError) as info:
        load_loader_state(url, dp_rank=0)
    assert f"{url}/{RANK0}" in str(info.value) and f"{size:,} bytes, more than the 4,000" in str(info.value)
    requests = log.read_bytes()[seen:].decode()
    assert f'"HEAD /{bucket}/ckpt/{RANK0} ' in requests
    assert f'"GET /{bucket}/ckpt/{RANK0} ' not in requests, "the object was downloaded"


# ----------------------------------------------------------------------------- refusals
def _message(error, *names):
    text = str(error)
    for name in names:
        assert name in text, (name, text)
    assert SECRET_KEY not in text
    return text


@pytest.mark.bad_input
@pytest.mark.parametrize("where", ["local", "store"])
def test_a_missing_state_is_refused_as_a_local_one_is(store, tmp_path, where):
    s3, bucket = store
    folder = str(tmp_path / "absent") if where == "local" else s3.url(bucket, "absent")
    with pytest.raises(FileNotFoundError) as info:
        load_loader_state(folder, dp_rank=0)
    text = _message(info.value, str(state_path(folder, 0)))
    assert text.replace(folder, "DIR") == (
        f"no loader state for DP rank 0: DIR/{RANK0} does not exist (present: none)"
    )
    with pytest.raises(FileNotFoundError) as info:
        read_rank_states(folder)
    assert str(info.value).replace(folder, "DIR") == "DIR does not exist"


@pytest.mark.bad_input
def test_a_missing_bucket_is_named(store):
    s3, _ = store
    url = s3.url("no-such-bucket-here", "ckpt")
    with pytest.raises(FileNotFoundError) as info:
        load_loader_state(url, dp_rank=0)
    _message(info.value, f"{url}/{RANK0} does not exist")
    with pytest.raises(StateStoreError) as info:
        save_loader_state(url, {}, dp_rank=0, fingerprint={})
    _message(info.value, f"cannot write {url}/{RANK0}", "its bucket does not exist", "'s3test'")


@pytest.mark.bad_input
def test_an_unknown_profile_is_named(store):
    with pytest.raises(StateStoreError) as info:
        load_loader_state("msc://no-such-profile/bucket/ckpt", dp_rank=0)
    _message(info.value, "msc://no-such-profile/bucket/ckpt", "'no-such-profile'", "MSC_CONFIG=")


@pytest.fixture(scope="module")
def guarded_s3(tmp_path_factory):
    """A second S3 server that checks credentials: it knows no access key, so every request with
    the test's credentials is refused (403), as a real store refuses wrong ones."""
    with LocalS3.start(tmp_path_factory.mktemp("s3-auth"), auth=True) as server:
        yield server


@pytest.mark.bad_input
@pytest.mark.parametrize("action", ["save", "load", "find"])
def test_refused_credentials_name_the_url_not_the_secret(guarded_s3, action):
    url = guarded_s3.url("some-bucket", "ckpt")
    with guarded_s3.environment(), pytest.raises(StateStoreError) as info:
        if action == "save":
            save_loader_state(url, {}, dp_rank=0, fingerprint={})
        elif action == "load":
            load_loader_state(url, dp_rank=0)
        else:
            find_rank_files(url)
    _message(info.value, url, "access denied", "refused the credentials", "'s3test'", "MSC_CONFIG=")
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_local_folder_is_still_written_atomically(tmp_path):
    """The same module writes local files: temporary file in the folder, renamed over the old."""
    save_loader_state(tmp_path, {"step": 1}, dp_rank=0, fingerprint={})
    with pytest.raises(RuntimeError, match="part-way"):
        save_loader_state(tmp_path, {"z": Unpicklable()}, dp_rank=0, fingerprint={})
    assert [p.name for p in Path(tmp_path).iterdir()] == [RANK0]
    assert load_loader_state(tmp_path, dp_rank=0) == {"step": 1}
