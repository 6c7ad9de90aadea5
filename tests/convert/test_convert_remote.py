"""``convert`` at scale, on object storage (issue 29): the source, the media folder, the output
and the part folders as ``msc://`` URLs, against a real S3 server (moto, a separate process).

A LLaVA source with rejected records (and three whose image path escapes the media folder:
``../x.jpg``, ``/abs.jpg``, an ``s3://`` URL, with a real image at the place ``../x.jpg``
names) is uploaded and converted from the store to the store; the dataset's objects are
byte-identical to a local conversion of the same files (shards, ``.tar.idx``, ``split.yaml``,
``dataset.yaml``, ``.info.json``; the report has the same records and reasons, its messages
naming URLs instead of paths) and the datamodule reads it by its URL. A ShareGPT JSON Lines
file and a folder of parquet files on the store give a local conversion's shards too. Two parts converted to
remote part folders and merged to a remote output equal the local run too, byte for byte. The
server's request log shows that an escaping path, an image over the size cap (refused from its
metadata) and a link leading out of the folder are never fetched. Unknown profiles, missing
buckets and objects are refused naming the URL, and the secret key is never printed. An upload
cut half-way names the object, and ``--resume`` finishes it.
"""

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import megatron.energon  # noqa: F401 - imported once: each conversion's forked indexing inherits it
import pytest
from click.testing import CliRunner

import energon_plugins
from energon_plugins import RecordError, convert_dataset
from energon_plugins.cli import cli
from energon_plugins.config.remote_storage import describe_storage_error, redact
from energon_plugins.convert.formats.media import MediaLimits, read_media_file
from energon_plugins.convert.merge import merge_parts
from energon_plugins.convert.progress import ConvertProgress
from energon_plugins.convert.storage import ConvertStorageError
from energon_plugins.testing.object_store import SECRET_KEY, DelayProxy
from tests._convert_sources import (
    SHARD,
    SPLITS,
    image_bytes,
    write_llava_source,
    write_parquet_source,
    write_sharegpt_source,
)
from tests._refusals import assert_refusal

ONE_TURN = [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A box."}]
SAME = ("split.yaml", "dataset.yaml", ".info.json")
NO_SLURM = {"SLURM_ARRAY_TASK_ID": None, "SLURM_ARRAY_TASK_COUNT": None}


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    """The source written locally (``raw/``: ``data.json``, ``images/``, and ``x.jpg`` beside
    them), uploaded to a bucket of its own, also as ``raw/images/data.json`` (whose default media
    folder is then the images' remote folder), beside an object that is no conversion
    (``other/README``); converted locally once, with one indexing process."""
    root = tmp_path_factory.mktemp("remote-src")
    source = write_llava_source(root / "raw")
    records = json.loads(source.path.read_text())
    escapes = {"esc-parent": "../x.jpg", "esc-absolute": "/abs.jpg", "esc-url": "s3://bucket/raw/x.jpg"}
    records += [{"id": ident, "image": name, "conversations": ONE_TURN} for ident, name in escapes.items()]
    source.path.write_text(json.dumps(records, indent=1))
    (root / "raw" / "x.jpg").write_bytes(image_bytes("jpg", (20, 20), 99))
    bucket = local_s3.new_bucket("convert")
    local_s3.upload_folder(root / "raw", bucket, "raw")
    local_s3.client().upload_file(str(source.path), bucket, "raw/images/data.json")
    local_s3.client().put_object(Bucket=bucket, Key="other/README", Body=b"not a conversion")
    whole = convert_dataset(
        source.path,
        root / "local",
        "llava-json",
        options=source.options,
        split_ratio=SPLITS,
        shard_size=SHARD,
        workers=0,
    )
    return {"bucket": bucket, "source": source, "whole": whole}


def requests(local_s3, bucket: str, key: str) -> list[str]:
    """The reads (``GET``, ``HEAD``) of the object ``bucket/key`` in the server's request log."""
    lines = (local_s3.root / "moto_server.log").read_text(errors="replace").splitlines()
    return [
        line
        for line in lines
        if any(f'"{verb} /{bucket}/{key}{end}' in line for verb in ("GET", "HEAD") for end in (" ", "?"))
    ]


def assert_same_dataset(local_s3, bucket: str, prefix: str, local: Path, *, index: bool = False) -> None:
    """The remote dataset's shards, ``.tar.idx`` and ``.nv-meta`` files are the local one's,
    byte for byte (``index.sqlite`` too with ``index``); its report has the same records."""
    names = [p.name for p in sorted(local.glob("*.tar*"))]
    names += [f".nv-meta/{name}" for name in SAME + (("index.sqlite",) if index else ())]
    assert len(names) > 8
    for name in names:
        assert local_s3.get(bucket, f"{prefix}/{name}") == (local / name).read_bytes(), name
    assert f"{prefix}/.nv-meta/index.uuid" in local_s3.keys(bucket, prefix)

    def rows(data: bytes) -> list[tuple]:
        return [(r["index"], r["location"], r["reason"]) for r in map(json.loads, data.splitlines())]

    remote_report = local_s3.get(bucket, f"{prefix}/rejected.jsonl")
    assert rows(remote_report) == rows((local / "rejected.jsonl").read_bytes())


# ----------------------------------------------------------------------------- equal to local
def test_store_to_store_equals_a_local_conversion_and_reads_by_url(
    local_s3, store, tmp_path, tokenizer, clip_processor
):
    bucket, whole = store["bucket"], store["whole"]
    url = local_s3.url(bucket, "ds")
    args = ["convert", local_s3.url(bucket, "raw/data.json"), url, "--from", "llava-json"]
    args += ["-o", f"image_folder={local_s3.url(bucket, 'raw/images')}", "--split-ratio", SPLITS]
    args += ["--shard-size", SHARD, "--workers", "2", "--max-rejected", "100%"]
    args += ["--staging", str(tmp_path / "staging"), "--json"]
    with local_s3.environment():
        result = CliRunner().invoke(cli, args, env=NO_SLURM)
        assert result.exit_code == 0, result.output
        assert SECRET_KEY not in result.output
        summary = json.loads(result.output[result.output.index("{") :])
        assert summary["output"] == url and summary["report"] == f"{url}/rejected.jsonl"
        assert summary["rejected"] == whole.rejected and whole.rejected["outside_folder"] == 2
        assert_same_dataset(local_s3, bucket, "ds", whole.output)
        state = json.loads(local_s3.get(bucket, "ds/convert.json"))
        assert state["status"] == "done" and state["source"] == local_s3.url(bucket, "raw/data.json")
        assert not (tmp_path / "staging").exists()  # the staging copies are gone once uploaded
        dm = energon_plugins.EnergonMultiModalDataModule(
            url, tokenizer, clip_processor, seq_length=2048, micro_batch_size=2, num_workers=0
        )
        batch = next(iter(dm.train_dataloader()))
    assert len(batch["__keys__"]) == 2 and batch["input_ids"].shape[0] == 2
    # what escapes the media folder is never requested; the images inside are
    assert requests(local_s3, bucket, "raw/x.jpg") == [] and requests(local_s3, bucket, "abs.jpg") == []
    assert any('"GET ' in line for line in requests(local_s3, bucket, "raw/images/000.png"))
    report = [json.loads(line) for line in local_s3.get(bucket, "ds/rejected.jsonl").splitlines()]
    by_id = {row["id"]: row for row in report}
    assert (
        by_id["esc-parent"]["reason"] == "outside_folder" and "'../x.jpg'" in by_id["esc-parent"]["message"]
    )
    assert by_id["esc-absolute"]["reason"] == "outside_folder"
    assert by_id["esc-url"]["reason"] == "url"


def test_parts_to_store_then_merge_to_store_equal_one_local_run(local_s3, store, tmp_path):
    """Parts 1/2 and 2/2 from ``raw/images/data.json`` (no image_folder: the file's remote
    folder is the default) to remote part folders, merged to a remote output."""
    bucket, whole = store["bucket"], store["whole"]
    source = local_s3.url(bucket, "raw/images/data.json")
    kwargs = dict(split_ratio=SPLITS, shard_size=SHARD, workers=0, max_rejected="100%")
    with local_s3.environment():
        for k in (1, 2):
            part = convert_dataset(
                source, local_s3.url(bucket, f"parts/{k}"), "llava-json", part=f"{k}/2", **kwargs
            )
            assert part.part == f"{k}/2" and part.output == local_s3.url(bucket, f"parts/{k}")
        assert not [key for key in local_s3.keys(bucket, "parts/") if ".nv-meta" in key]
        fetched = len(requests(local_s3, bucket, "raw/images/data.json"))
        again = convert_dataset(
            source, local_s3.url(bucket, "parts/1"), "llava-json", part="1/2", resume=True, **kwargs
        )  # finished: its result, from one listing of the source (nothing downloaded)
        assert again.part == "1/2" and again.records == 15
        assert not [r for r in requests(local_s3, bucket, "raw/images/data.json")[fetched:] if '"GET ' in r]
        parts = [local_s3.url(bucket, "parts/2"), local_s3.url(bucket, "parts/1")]
        merged = merge_parts(parts, local_s3.url(bucket, "merged"), workers=0, staging=tmp_path / "merge")
    assert merged.merged_parts == 2 and merged.output == local_s3.url(bucket, "merged")
    assert merged.written == whole.written and merged.rejected["outside_folder"] == 2
    assert_same_dataset(local_s3, bucket, "merged", whole.output, index=True)  # one indexer each
    state = json.loads(local_s3.get(bucket, "merged/convert.json"))
    assert state["status"] == "done" and state["merged_from"] == [parts[1], parts[0]]


@pytest.fixture(scope="module")
def formats(local_s3, tmp_path_factory):
    """A ShareGPT JSON Lines file with its images beside it, and a folder of parquet files with
    embedded images, written locally and uploaded: ``(bucket, root, {format: source})``."""
    root = tmp_path_factory.mktemp("formats")
    bucket = local_s3.new_bucket("formats")
    sources = {
        "sharegpt": write_sharegpt_source(root / "sg"),
        "hf-parquet": write_parquet_source(root / "pq"),
    }
    for folder in ("sg", "pq"):
        local_s3.upload_folder(root / folder, bucket, folder)
    return bucket, root, sources


@pytest.mark.parametrize("fmt", ["sharegpt", "hf-parquet"])
def test_jsonl_and_parquet_sources_on_the_store_give_the_local_shards(local_s3, formats, tmp_path, fmt):
    bucket, root, sources = formats
    source = sources[fmt]
    options = {k: v for k, v in source.options.items() if k != "image_folder"}  # default: beside it
    kwargs = dict(options=options, split_ratio=SPLITS, shard_size=SHARD, workers=0)
    local = convert_dataset(source.path, tmp_path / "local", fmt, **kwargs)
    with local_s3.environment():
        url = local_s3.url(bucket, source.path.relative_to(root).as_posix())
        remote = convert_dataset(url, tmp_path / "remote", fmt, staging=tmp_path / "s", **kwargs)
    assert remote.written == local.written and remote.rejected == local.rejected
    assert sorted(p.name for p in remote.output.glob("*.tar")) == sorted(
        p.name for p in local.output.glob("*.tar")
    )
    for shard in local.output.glob("*.tar*"):
        assert (remote.output / shard.name).read_bytes() == shard.read_bytes(), shard.name
    state = json.loads((remote.output / "convert.json").read_text())
    assert state["source"] == url and [row[3] for row in state["fingerprint"]] == [
        row[3] for row in json.loads((local.output / "convert.json").read_text())["fingerprint"]
    ]
    assert not (tmp_path / "s").exists()


@pytest.mark.bad_input
def test_a_reader_error_names_the_remote_file_not_its_copy(local_s3, formats, tmp_path):
    bucket, _, _ = formats
    url = local_s3.url(bucket, "pq/data")
    with local_s3.environment(), pytest.raises(energon_plugins.ConvertError) as raised:
        convert_dataset(url, tmp_path / "out", "hf-parquet", workers=0, staging=tmp_path / "s")
    message = str(raised.value)
    assert message.startswith(f"{url}/") and "no turns column" in message and "turns_column" in message
    assert str(tmp_path / "s") not in message


# ----------------------------------------------------------------------------- media guarantees
@pytest.fixture(scope="module")
def media(local_s3):
    """A remote media folder ``m/`` with an image, a link inside, a link leading out of it to
    ``x.jpg``, an image of 300 bytes, a sub-folder; ``x.jpg`` lies outside the folder."""
    bucket = local_s3.new_bucket("media")
    client = local_s3.client()
    picture = image_bytes("png", (12, 10), 3)
    for key, body, meta in [
        ("m/ok.png", picture, {}),
        ("x.jpg", image_bytes("jpg", (12, 10), 4), {}),
        ("m/inside-link.png", b"", {"msc-symlink-target": "ok.png"}),
        ("m/leaving-link.jpg", b"", {"msc-symlink-target": "../x.jpg"}),
        ("m/big.jpg", b"\xff" * 300, {}),
        ("m/sub/a.png", picture, {}),
    ]:
        client.put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta)
    return bucket, picture


LIMITS = MediaLimits(max_image_size=200)


def test_remote_media_inside_the_folder_is_read(local_s3, media):
    bucket, picture = media
    with local_s3.environment():
        folder = local_s3.url(bucket, "m")
        assert read_media_file(folder, "ok.png", "image", LIMITS) == picture
        assert read_media_file(folder, "sub/../ok.png", "image", LIMITS) == picture
        assert read_media_file(folder, "inside-link.png", "image", LIMITS) == picture


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("name", "reason", "never"),
    [
        ("../x.jpg", "outside_folder", "x.jpg"),
        ("sub/../../x.jpg", "outside_folder", "x.jpg"),
        ("/x.jpg", "outside_folder", "x.jpg"),
        ("s3://{bucket}/x.jpg", "url", "x.jpg"),
        ("msc://s3test/{bucket}/x.jpg", "url", "x.jpg"),
        ("leaving-link.jpg", "outside_folder", "x.jpg"),
        ("big.jpg", "too_large", None),
        ("sub", "not_a_file", None),
        ("absent.jpg", "missing_image", None),
        (".", "not_a_file", None),
    ],
    ids=["parent", "normalised-parent", "absolute", "s3-url", "msc-url", "link-out", "over-cap", "folder"]
    + ["missing", "the-folder"],
)
def test_remote_media_refusals_name_the_reason_and_fetch_nothing(local_s3, media, name, reason, never):
    bucket, _ = media
    name = name.format(bucket=bucket)
    with local_s3.environment(), pytest.raises(RecordError) as raised:
        read_media_file(local_s3.url(bucket, "m"), name, "images[2]", LIMITS)
    assert raised.value.reason == reason
    assert raised.value.message.startswith("images[2]: ") and (
        name in raised.value.message or reason == "not_a_file"
    )
    if never is not None:
        assert requests(local_s3, bucket, never) == []
    if reason == "too_large":  # refused from its metadata: a HEAD, never a GET
        seen = requests(local_s3, bucket, "m/big.jpg")
        assert any('"HEAD ' in line for line in seen) and not any('"GET ' in line for line in seen)
        assert "300 bytes" in raised.value.message and "--max-image-size" in raised.value.message


# ----------------------------------------------------------------------------- refusals
ERRORS = [
    (
        "source-profile",
        ["msc://nosuch/b/data.json", "{out}"],
        ["msc://nosuch/b/data.json", "'nosuch'", "s3test"],
    ),
    (
        "source-bucket",
        ["msc://s3test/no-such-bucket-zz/d.json", "{out}"],
        ["'no-such-bucket-zz' does not exist"],
    ),
    ("source-missing", ["{raw}/absent.json", "{out}"], ["{raw}/absent.json", "no such source", "'s3test'"]),
    ("output-profile", ["{raw}/data.json", "msc://nosuch/b/ds"], ["msc://nosuch/b/ds", "'nosuch'"]),
    (
        "output-bucket",
        ["{raw}/data.json", "msc://s3test/no-such-bucket-zz/ds"],
        ["'no-such-bucket-zz' does not"],
    ),
    (
        "output-foreign",
        ["{raw}/data.json", "{bucket}/other"],
        ["{bucket}/other", "README", "no convert.json"],
    ),
    ("output-in-source", ["{raw}", "{raw}/out"], ["{raw}/out", "must not be the source or inside it"]),
    (
        "media-bucket",
        ["{raw}/data.json", "{out}", "-o", "image_folder=msc://s3test/no-such-bucket-zz/m"],
        ["msc://s3test/no-such-bucket-zz/m", "'no-such-bucket-zz' does not exist"],
    ),
    (
        "merge-absent-part",
        ["merge", "{bucket}/parts/none", "{out}"],
        ["{bucket}/parts/none", "no part folder"],
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("args", "names"), [row[1:] for row in ERRORS], ids=[row[0] for row in ERRORS])
def test_storage_refusals_name_the_url_and_change_nothing(local_s3, store, tmp_path, args, names):
    bucket = store["bucket"]
    fill = {
        "raw": local_s3.url(bucket, "raw"),
        "out": local_s3.url(bucket, "refused"),
        "bucket": local_s3.url(bucket),
    }
    args = [arg.format(**fill) for arg in args]
    command = args if args[0] == "merge" else [*args, "--from", "llava-json"]
    with local_s3.environment():
        before = local_s3.keys(bucket)
        result = CliRunner().invoke(
            cli, ["convert", *command, "--staging", str(tmp_path / "s")], env=NO_SLURM
        )
        assert local_s3.keys(bucket) == before
    assert result.exit_code == 1, result.output
    assert_refusal(result.output, *(name.format(**fill) for name in names))
    assert SECRET_KEY not in result.output and not (tmp_path / "s").exists()


@pytest.mark.bad_input
def test_refused_credentials_are_named_without_the_secret(local_s3):
    from botocore.exceptions import ClientError

    url = local_s3.url("data", "raw/data.json")
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": f"no ({SECRET_KEY})"}}, "GetObject")
    with local_s3.environment():
        text = redact(describe_storage_error(url, "the source", denied))
        other = redact(describe_storage_error(url, "the source", RuntimeError(f"signed with {SECRET_KEY}")))
    assert text.startswith(f"{url}: access denied to the source") and "'s3test'" in text
    assert "MSC_CONFIG=" in text and SECRET_KEY not in text + other and "***" in other


# ----------------------------------------------------------------------------- a cut upload
class _CutUpload(ConvertProgress):
    """Drops every connection through ``proxy`` once the upload starts."""

    def __init__(self, proxy: DelayProxy) -> None:
        self.proxy = proxy

    def phase(self, text: str) -> None:
        """Cut the connection at the upload."""
        if text.startswith("uploading"):
            self.proxy.drop = True


def test_a_cut_upload_names_the_object_and_resume_finishes_it(local_s3, store, tmp_path):
    bucket, whole, source = store["bucket"], store["whole"], store["source"]
    saved = local_s3.config_path.read_text()
    proxy = DelayProxy(local_s3.port)
    local_s3.write_config(
        {local_s3.profile: (local_s3.endpoint, ""), "s3cut": (proxy.endpoint, "")},
        retry={"attempts": 1, "delay": 0.0},
        read_timeout=2,
    )
    url = f"msc://s3cut/{bucket}/cut"
    kwargs = dict(
        options=source.options, split_ratio=SPLITS, shard_size=SHARD, workers=0, staging=tmp_path / "s"
    )
    try:
        with local_s3.environment():
            with pytest.raises(ConvertStorageError) as raised:
                convert_dataset(source.path, url, "llava-json", progress=_CutUpload(proxy), **kwargs)
            message = str(raised.value)
            assert message.startswith(f"{url}/") and "'s3cut'" in message and "--resume" in message
            assert str(tmp_path / "s") in message and SECRET_KEY not in message
            assert json.loads(local_s3.get(bucket, "cut/convert.json"))["status"] == "uploading"
            proxy.drop = False
            with pytest.raises(
                energon_plugins.ConvertError, match="holds an earlier conversion .uploading.; pass --resume"
            ):
                convert_dataset(source.path, url, "llava-json", **kwargs)
            result = convert_dataset(source.path, url, "llava-json", resume=True, **kwargs)
    finally:
        proxy.close()
        local_s3.config_path.write_text(saved)
    assert result.output == url and result.written == whole.written
    assert json.loads(local_s3.get(bucket, "cut/convert.json"))["status"] == "done"
    assert_same_dataset(local_s3, bucket, "cut", whole.output, index=True)
    assert not (tmp_path / "s").exists()
