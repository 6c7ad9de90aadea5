"""``validate`` and the datamodule on ``msc://`` datasets of a real S3 server (moto), issue 29.

A remote dataset is checked up front like a local one: the profile is defined, the bucket
exists, the credentials are accepted, ``.nv-meta`` is there, the shards are whole, the sample
type is one the task encoder reads. Each refusal names the URL, the profile and the problem,
exits 1 without a traceback, and never prints a credential. Bad credentials are refused by a
second moto server with its IAM authentication on (``/moto-api/reset-auth``: the first server
accepts any key). ``validate --deep`` reads the remote samples through the whole pipeline.
"""

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import energon_plugins
from energon_plugins.cli import cli
from energon_plugins.errors import DatasetError
from energon_plugins.testing.object_store import (
    ACCESS_KEY,
    SECRET_KEY,
    LocalS3,
    free_port,
    msc_config_text,
    storage_environment,
)
from tests._refusals import assert_refusal

REFUSED = 1


def copy_prefix(s3, bucket, source, target, *, skip=(), replace=None):
    """Copy every object under ``source/`` to ``target/`` on the server (``skip``: names left out;
    ``replace``: name -> new bytes)."""
    client = s3.client()
    for key in s3.keys(bucket, f"{source}/"):
        name = key[len(source) + 1 :]
        if name in skip:
            continue
        if replace and name in replace:
            client.put_object(Bucket=bucket, Key=f"{target}/{name}", Body=replace[name])
        else:
            client.copy_object(
                Bucket=bucket, Key=f"{target}/{name}", CopySource={"Bucket": bucket, "Key": key}
            )


@pytest.fixture(scope="module")
def site(local_s3, vqa_dataset, tokenizer, tmp_path_factory):
    """A tokenizer folder, and a bucket holding ``vqa/`` (the VQA dataset), ``bare/`` (a shard
    without .nv-meta), ``holes/`` (shard 1 missing, shard 2 cut short) and ``ocr/`` (the same
    shards, declared as ImageClassificationSample)."""
    root = tmp_path_factory.mktemp("remote-validate")
    tokenizer.save_pretrained(root / "tokenizer")
    bucket = local_s3.new_bucket("validate")
    local_s3.upload_folder(vqa_dataset.path, bucket, "vqa")
    shard = (vqa_dataset.path / "shard-000002.tar").read_bytes()
    copy_prefix(
        local_s3,
        bucket,
        "vqa",
        "holes",
        skip={"shard-000001.tar"},
        replace={"shard-000002.tar": shard[:4096]},
    )
    ocr = (
        (vqa_dataset.path / ".nv-meta" / "dataset.yaml")
        .read_text()
        .replace("VQASample", "ImageClassificationSample")
    )
    copy_prefix(local_s3, bucket, "vqa", "ocr", replace={".nv-meta/dataset.yaml": ocr.encode()})
    local_s3.client().put_object(Bucket=bucket, Key="bare/shard-000000.tar", Body=shard)
    return root, bucket


def write_config(root: Path, name: str, path: str, **values) -> Path:
    config = {
        "path": path,
        "tokenizer": {"path": str(root / "tokenizer")},
        "seq_length": 1024,
        "num_workers": 0,
    }
    config.update(values)
    file = root / f"{name}.yaml"
    file.write_text(yaml.safe_dump(config))
    return file


def validate(config: Path, env: dict, *args: str):
    with storage_environment(env):
        return CliRunner().invoke(cli, ["validate", str(config), *args], env={"COLUMNS": "400"})


# ------------------------------------------------------------------ a server that checks keys
@pytest.fixture(scope="module")
def auth_s3(tmp_path_factory, vqa_dataset):
    """A second server with IAM authentication on: ``(server, bucket, IAM key id, its secret)``."""
    with LocalS3.start(tmp_path_factory.mktemp("s3-auth"), auth=True) as server:
        with server.unchecked():
            bucket = server.new_bucket("auth")
            server.upload_folder(vqa_dataset.path / ".nv-meta", bucket, "vqa/.nv-meta")
        key_id, secret = server.create_access_key("reader")
        yield server, bucket, key_id, secret


def test_the_auth_server_accepts_its_own_key_and_refuses_others(auth_s3):
    from energon_plugins.config.remote_dataset import remote_dataset_splits

    server, bucket, key_id, secret = auth_s3
    url = server.url(bucket, "vqa")
    env = {**server.env(), "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
    with storage_environment(env):
        assert remote_dataset_splits(url) == ("webdataset", ["train", "val"])
    with storage_environment(server.env()), pytest.raises(DatasetError, match="access denied"):
        remote_dataset_splits(url)


# ------------------------------------------------------------------ the table
def _dead_config(root: Path) -> str:
    file = root / "dead-endpoint.yaml"
    file.write_text(
        msc_config_text(
            {"s3test": (f"http://127.0.0.1:{free_port()}", "")}, retry={"attempts": 1, "delay": 0}
        )
    )
    return str(file)


def _malformed_config(root: Path) -> str:
    """A config that MSC refuses, holding the secret as a literal (its error quotes it)."""
    file = root / "malformed.yaml"
    file.write_text(
        "profiles:\n  s3test:\n    storage_provider: {type: s3, options: {base_path: ''}}\n"
        f"    credentials_provider:\n      type: S3Credentials\n      options: [{ACCESS_KEY}, {SECRET_KEY}]\n"
    )
    return str(file)


PROFILE = "profile 's3test'"
ROWS = [
    # (id, path(bucket), environment kind, what the message names besides the URL)
    (
        "wrong-bucket",
        lambda b: "msc://s3test/no-such-bucket-x/vqa",
        "s3",
        [PROFILE, "bucket 'no-such-bucket-x' does not exist"],
    ),
    (
        "no-nv-meta",
        lambda b: f"msc://s3test/{b}/bare",
        "s3",
        [PROFILE, "no .nv-meta/dataset.yaml", "energon prepare"],
    ),
    ("nothing-there", lambda b: f"msc://s3test/{b}/nope", "s3", [PROFILE, "nothing is stored at this path"]),
    (
        "unknown-profile",
        lambda b: f"msc://s3tset/{b}/vqa",
        "s3",
        ["profile 's3tset' is not defined", "'s3test'"],
    ),
    (
        "missing-shard",
        lambda b: f"msc://s3test/{b}/holes",
        "s3",
        [PROFILE, "shard shard-000001.tar", "is missing"],
    ),
    (
        "shard-cut-short",
        lambda b: f"msc://s3test/{b}/holes",
        "s3",
        [PROFILE, "shard-000002.tar (4096 bytes", "cut short"],
    ),
    (
        "no-metadataset-file",
        lambda b: f"msc://s3test/{b}/blend.yaml",
        "s3",
        [PROFILE, "the metadataset file does not exist"],
    ),
    (
        "sample-type",
        lambda b: f"msc://s3test/{b}/ocr",
        "s3",
        ["holds ImageClassificationSample samples", "does not read"],
    ),
    (
        "dead-endpoint",
        lambda b: f"msc://s3test/{b}/vqa",
        "dead",
        [PROFILE, "cannot reach the storage endpoint"],
    ),
    ("malformed-config", lambda b: f"msc://s3test/{b}/vqa", "malformed", [PROFILE, "config cannot be read"]),
    ("unknown-access-key", None, "auth-unknown", [PROFILE, "access denied", "refused the credentials"]),
    ("wrong-secret-key", None, "auth-wrong-secret", [PROFILE, "access denied", "refused the credentials"]),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("path", "kind", "expected"), [pytest.param(*row[1:], id=row[0]) for row in ROWS])
def test_validate_names_the_remote_problem_and_no_secret(site, local_s3, request, path, kind, expected):
    root, bucket = site
    env = local_s3.env()
    if kind.startswith("auth"):
        server, bucket, key_id, _ = request.getfixturevalue("auth_s3")
        url = server.url(bucket, "vqa")
        env = server.env()
        if kind == "auth-wrong-secret":  # the key exists; its secret is not this one
            env = {**env, "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    else:
        url = path(bucket)
        if kind == "dead":
            env = {**env, "MSC_CONFIG": _dead_config(root)}
        elif kind == "malformed":
            env = {**env, "MSC_CONFIG": _malformed_config(root), "AWS_SECRET_ACCESS_KEY": "another-value"}
    result = validate(write_config(root, f"bad-{kind}", url), env)
    assert result.exit_code == REFUSED, result.output
    assert_refusal(result.output, url, *expected)
    assert SECRET_KEY not in result.output and ACCESS_KEY not in result.output


def test_a_local_metadataset_with_a_bad_remote_leaf_names_the_leaf(site, local_s3):
    root, bucket = site
    leaf = local_s3.url(bucket, "bare")
    blend = root / "blend.yaml"
    blend.write_text(
        yaml.safe_dump(
            {
                "__module__": "megatron.energon",
                "__class__": "MetadatasetV2",
                "splits": {"train": {"path": leaf}},
            }
        )
    )
    result = validate(write_config(root, "blend-config", str(blend)), local_s3.env())
    assert result.exit_code == REFUSED, result.output
    assert_refusal(result.output, leaf, ".nv-meta/dataset.yaml", "profile 's3test'")


# ------------------------------------------------------------------ good remote datasets
def test_validate_deep_reads_a_remote_datasets_samples_and_batches(site, local_s3, monkeypatch):
    from energon_plugins.checks import sample_read

    # The whole split, however busy the machine: the 5 s read limit is not what is tested here.
    monkeypatch.setattr(sample_read, "TIME_LIMIT_S", 600.0)
    root, bucket = site
    config = write_config(root, "good", local_s3.url(bucket, "vqa"), micro_batch_size=2)
    result = validate(config, local_s3.env(), "--deep", "--samples", "2")
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "batches read" in result.output
    assert "read 45 samples" in result.output  # the whole train split, over the store
    assert SECRET_KEY not in result.output


def test_a_remote_metadataset_and_its_relative_leaf_are_read(site, local_s3):
    from energon_plugins.config.dataset_check import check_dataset
    from energon_plugins.config.dataset_fit import dataset_parts

    _, bucket = site
    blend = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {"train": {"path": "vqa"}},
    }
    local_s3.client().put_object(Bucket=bucket, Key="blend-ok.yaml", Body=yaml.safe_dump(blend).encode())
    with local_s3.environment():
        url = local_s3.url(bucket, "blend-ok.yaml")
        assert check_dataset(url) == "metadataset"
        [part] = dataset_parts(url, split="train")
        assert (part.path, part.cls) == (local_s3.url(bucket, "vqa"), "VQASample")


def test_the_datamodule_refuses_a_wrong_bucket_when_it_is_built(local_s3, tokenizer):
    url = local_s3.url("no-such-bucket-y", "vqa")
    with local_s3.environment(), pytest.raises(DatasetError) as info:
        energon_plugins.EnergonMultiModalDataModule(path=url, tokenizer=tokenizer, num_workers=0)
    assert url in str(info.value) and "bucket 'no-such-bucket-y' does not exist" in str(info.value)
    assert info.value.__cause__ is None  # the storage error (which may quote the config) is dropped
