"""``energon-plugins checkpoint info`` and ``checkpoint redistribute`` on ``msc://`` folders of a
real S3 server (moto: ``local_s3``), issue 29. Two simulated DP ranks save after two batches
(``tests/loading/_rank_runs.py``) and their files are uploaded; ``redistribute`` from and to the
store (each side local or remote) writes exactly the files it writes from and to local folders.
The exactness of a restore from redistributed files is tested locally in
``test_checkpoint_cli.py``; the restore from the store in ``tests/loading/test_remote_state.py``.
"""

import json

import pytest
from click.testing import CliRunner

from energon_plugins.cli import cli
from energon_plugins.testing.object_store import SECRET_KEY
from tests._refusals import assert_refusal, unchanged
from tests.loading._rank_runs import builder, save_run

RANK = "train_dataloader_dprank{:03d}.pt".format
USAGE = 2
"""Click's exit code for arguments click itself checks."""
REFUSED = 1
"""The exit code of an input the verb refuses (``Error:`` and the reason, no traceback)."""


@pytest.fixture(scope="module")
def saved(vqa_dataset, tokenizer, tmp_path_factory):
    """A local folder of 2 rank files saved after two batches each."""
    folder = tmp_path_factory.mktemp("remote-cli") / "ckpt"
    save_run(builder(vqa_dataset.path, tokenizer), folder, 2)
    return folder


@pytest.fixture
def store(local_s3, saved):
    """``(server, bucket, URL of the uploaded rank files)``, the storage environment set."""
    bucket = local_s3.new_bucket("cli")
    local_s3.upload_folder(saved, bucket, "ckpt")
    with local_s3.environment():
        yield local_s3, bucket, local_s3.url(bucket, "ckpt")


def invoke(*args: object):
    return CliRunner().invoke(cli, [str(arg) for arg in args], env={"COLUMNS": "200"})


def test_info_reads_a_folder_on_the_store(store):
    _, _, url = store
    result = invoke("checkpoint", "info", url)
    assert result.exit_code == 0, result.output
    for expected in (url, "2 DP ranks x 0 workers", RANK(0), RANK(1), "complete and consistent"):
        assert expected in result.stdout, (expected, result.stdout)
    summary = json.loads(invoke("checkpoint", "info", url, "--json").stdout)
    assert (summary["folder"], summary["ranks"], summary["complete"]) == (url, 2, True)


@pytest.mark.parametrize("src_on", ["store", "disk"])
@pytest.mark.parametrize("dst_on", ["store", "disk"])
def test_redistribute_from_and_to_the_store_writes_the_local_files(store, saved, tmp_path, src_on, dst_on):
    s3, bucket, url = store
    assert invoke("checkpoint", "redistribute", saved, tmp_path / "reference", "--dp", 1).exit_code == 0
    want = (tmp_path / "reference" / RANK(0)).read_bytes()
    src = url if src_on == "store" else saved
    dst = s3.url(bucket, "dp1") if dst_on == "store" else tmp_path / "dp1"
    result = invoke("checkpoint", "redistribute", src, dst, "--dp", 1)
    assert result.exit_code == 0, result.output
    assert f"wrote 1 rank files to {dst}" in result.stdout
    if dst_on == "store":
        assert s3.keys(bucket, "dp1/") == [f"dp1/{RANK(0)}"], "one object per rank, no staging key"
        assert s3.get(bucket, f"dp1/{RANK(0)}") == want
    else:
        assert [p.name for p in (tmp_path / "dp1").iterdir()] == [RANK(0)]
        assert (tmp_path / "dp1" / RANK(0)).read_bytes() == want
    assert s3.keys(bucket, "ckpt/") == [f"ckpt/{RANK(0)}", f"ckpt/{RANK(1)}"], "the source is kept"


# ----------------------------------------------------------------------------- refusals
def _fill(s3, bucket):
    s3.client().put_object(Bucket=bucket, Key="dst/notes.txt", Body=b"keep me\n")


def _drop_rank_1(s3, bucket):
    s3.client().delete_object(Bucket=bucket, Key=f"ckpt/{RANK(1)}")


CASES = [
    # (id, arguments ({src}, {dst}: URLs on the store; {bucket}), damage, exit code, what is named)
    ("info-absent-folder", ["info", "{dst}"], None, USAGE, ["{dst}", "does not exist"]),
    (
        "info-absent-bucket",
        ["info", "msc://s3test/no-such-bucket/ckpt"],
        None,
        USAGE,
        ["no-such-bucket", "does not exist"],
    ),
    (
        "info-unknown-profile",
        ["info", "msc://no-such-profile/{bucket}/ckpt"],
        None,
        USAGE,
        ["msc://no-such-profile/", "'no-such-profile'", "MSC_CONFIG="],
    ),
    ("info-missing-rank", ["info", "{src}"], _drop_rank_1, REFUSED, [RANK(1), "missing", "2 DP ranks"]),
    (
        "redistribute-absent-source",
        ["redistribute", "{dst}", "{src}2", "--dp", "1"],
        None,
        USAGE,
        ["{dst}", "does not exist"],
    ),
    (
        "redistribute-into-a-filled-folder",
        ["redistribute", "{src}", "{dst}", "--dp", "1"],
        _fill,
        REFUSED,
        ["{dst}", "is not empty"],
    ),
    (
        "redistribute-missing-rank",
        ["redistribute", "{src}", "{dst}", "--dp", "1"],
        _drop_rank_1,
        REFUSED,
        [RANK(1), "missing", "2 DP ranks"],
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("arguments", "damage", "code", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_bad_remote_checkpoint_argument_is_refused_by_name(store, tmp_path, arguments, damage, code, named):
    s3, bucket, url = store
    if damage is not None:
        damage(s3, bucket)
    values = {"src": url, "dst": s3.url(bucket, "dst"), "bucket": bucket}
    before = s3.keys(bucket)
    with unchanged(tmp_path):
        result = invoke("checkpoint", *(a.format(**values) for a in arguments))
    assert s3.keys(bucket) == before, "a refused input changed objects"
    assert result.exit_code == code, result.output
    message = result.stderr if code == REFUSED else result.output
    assert_refusal(message, *(name.format(**values) for name in named), one_paragraph=code == REFUSED)
    assert SECRET_KEY not in result.output
    if code == REFUSED:
        assert message.startswith("Error: ")
