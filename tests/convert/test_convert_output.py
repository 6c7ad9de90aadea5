"""``convert``'s output side, on real conversions: ``--overwrite`` removes only what an earlier
conversion wrote (and never a source inside the output folder), a full disk is one message and
a resumable run, repeated ids are reported, a run that rejects too much fails with the likely
fix, split shares must sum to 1, a touched source still resumes, and the progress it reports.

The full disk is real: a small tmpfs mounted for the test when this machine allows ``mount``
(root), and always a file-size limit (``RLIMIT_FSIZE`` in a subprocess, where a write past it
fails with ``EFBIG``).
"""

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import megatron.energon  # noqa: F401 - imported once: each conversion's forked indexing inherits it
import pytest
from click.testing import CliRunner

from energon_plugins import ConvertError, convert_dataset
from energon_plugins.cli import cli
from energon_plugins.convert.progress import ConvertProgress
from energon_plugins.convert.report import read_report
from tests._convert_sources import (
    SHARD,
    SPLITS,
    image_bytes,
    llava_args,
    tree_bytes,
    write_llava_source,
    write_parquet_source,
    write_sharegpt_source,
)


class Recorder(ConvertProgress):
    """Everything a conversion reports."""

    def __init__(self) -> None:
        self.notices: list[str] = []
        self.phases: list[str] = []
        self.totals: list[int] = []
        self.advances: list[tuple[int, int]] = []

    def notice(self, text):
        self.notices.append(text)

    def phase(self, text):
        self.phases.append(text)

    def total(self, records):
        self.totals.append(records)

    def advance(self, done, rejected):
        self.advances.append((done, rejected))


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    """The LLaVA source of test_convert (27 records, 7 of them bad: 26% rejected)."""
    return write_llava_source(tmp_path_factory.mktemp("llava") / "src")


@pytest.fixture(scope="module")
def uninterrupted(llava, tmp_path_factory):
    """``llava`` converted in one go: what every resumed run must equal byte for byte."""
    return convert_dataset(
        llava.path,
        tmp_path_factory.mktemp("whole") / "out",
        "llava-json",
        options=llava.options,
        split_ratio=SPLITS,
        shard_size=SHARD,
        workers=0,
    )


# ----------------------------------------------------------------------------- --overwrite
def test_overwrite_removes_only_what_the_earlier_conversion_wrote(llava, uninterrupted, tmp_path):
    out = tmp_path / "out"
    first = convert_dataset(
        llava.path,
        out,
        "llava-json",
        options=llava.options,
        split_ratio="train=0.5,val=0.25,test=0.25",
        shard_size=SHARD,
        workers=0,
    )
    tars = sum(len(names) for names in first.shards.values())
    assert first.shards["test"] and list(out.glob("test-*.tar.idx"))  # Energon's .tar.idx too
    mine = {
        "README.md": b"# my data\n",
        "blend.yaml": b"__module__: megatron.energon\n",
        "notes/todo.txt": b"check val\n",
        ".nv-meta/extra.txt": b"mine\n",
    }
    for name, data in mine.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_bytes(data)
    seen = Recorder()
    again = convert_dataset(
        llava.path,
        out,
        "llava-json",
        options=llava.options,
        split_ratio=SPLITS,
        shard_size=SHARD,
        workers=0,
        overwrite=True,
        progress=seen,
    )
    [notice] = seen.notices
    assert notice.startswith(
        f"--overwrite: removing {tars} shards, the report and the index of "
        f"the earlier conversion in {out} (kept: "
    )
    for name in ("README.md", "blend.yaml", "notes", ".nv-meta/extra.txt"):
        assert name in notice
    assert {name: (out / name).read_bytes() for name in mine} == mine
    # nothing of the first conversion is left: the folder equals a fresh conversion's
    assert tree_bytes(out) == tree_bytes(uninterrupted.output)
    assert sorted(p.name for p in out.glob("*.tar")) == sorted(
        name for names in again.shards.values() for name in names
    )
    assert sorted(p.name[:-4] for p in out.glob("*.tar.idx")) == sorted(p.name for p in out.glob("*.tar"))

    (out / "convert.json").write_text("{broken")  # unreadable: its files are known by their names
    with pytest.raises(ConvertError, match="unreadable"):
        convert_dataset(llava.path, out, "llava-json", options=llava.options, resume=True)
    convert_dataset(
        llava.path,
        out,
        "llava-json",
        options=llava.options,
        split_ratio=SPLITS,
        shard_size=SHARD,
        workers=0,
        overwrite=True,
    )
    assert {name: (out / name).read_bytes() for name in mine} == mine
    assert tree_bytes(out) == tree_bytes(uninterrupted.output)


def test_a_source_inside_the_output_folder_is_refused(llava, tmp_path):
    out = tmp_path / "out"
    convert_dataset(
        llava.path, out, "llava-json", options=llava.options, split_ratio=SPLITS, shard_size=SHARD, workers=0
    )
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    inner = out / "incoming"
    shutil.copytree(llava.path.parent, inner)  # data.json and images/ dropped into the output
    runner = CliRunner()
    for flag in ("--overwrite", "--resume"):
        result = runner.invoke(
            cli,
            [
                "convert",
                str(inner / "data.json"),
                str(out),
                "--from",
                "llava-json",
                "-o",
                f"image_folder={inner / 'images'}",
                "--workers",
                "0",
                flag,
            ],
        )
        assert result.exit_code == 1, result.output
        assert f"the source is inside the output folder {out}" in result.output
        assert "Traceback" not in result.output
    assert (inner / "data.json").read_bytes() == llava.path.read_bytes()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


# ----------------------------------------------------------------------------- a full disk
_LIMITED_RUN = """
import resource, signal, sys

limit = int(sys.argv[1])
if limit:  # a write past the limit fails with EFBIG (the signal would kill the process)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from energon_plugins.convert.settings import ConvertSettings

ConvertSettings.model_fields["checkpoint_every"].default = 2  # checkpoints in a small source
ConvertSettings.model_rebuild(force=True)
from energon_plugins.cli.main import main

main(sys.argv[2:])
"""


def _run_limited(tmp_path, limit, args):
    script = tmp_path / "limited.py"
    script.write_text(_LIMITED_RUN)
    env = {**os.environ, "PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, str(script), str(limit), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    if shutil.which("mount") is None:
        return False
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


@pytest.mark.parametrize("limit", ["tmpfs", "file-size"])
def test_a_full_disk_is_one_message_and_resume_finishes_the_same(llava, uninterrupted, tmp_path, limit):
    disk = tmp_path / "disk"
    if limit == "tmpfs":
        if not _mount_tmpfs(disk, "40k"):
            pytest.skip("mounting a tmpfs is not allowed here (not root)")
        errno_name, fsize = "ENOSPC", 0
    else:
        disk.mkdir()
        errno_name, fsize = "EFBIG", 6 * 1024  # below a shard (tar rounds it up to 10 KiB)
    out = disk / "out"
    try:
        proc = _run_limited(tmp_path, fsize, llava_args(llava, out, "--max-rejected", "100%"))
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
        [error] = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
        assert error.startswith(f"Error: {out}: a write failed: ") and f"({errno_name})" in error
        assert "run the same command with --resume" in error
        state = json.loads((out / "convert.json").read_text())
        checkpoint = state["checkpoint"]["next_index"]
        assert state["status"] == "running" and checkpoint > 0  # what was checkpointed is kept
        if limit == "tmpfs":  # space freed
            subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        resumed = CliRunner().invoke(
            cli, llava_args(llava, out, "--max-rejected", "100%", "--resume", "--json")
        )
        assert resumed.exit_code == 0, resumed.output
        assert json.loads(resumed.stdout)["resumed_from"] == checkpoint
        assert tree_bytes(out) == tree_bytes(uninterrupted.output)
    finally:
        if limit == "tmpfs":
            subprocess.run(["umount", str(disk)], check=False)


# ----------------------------------------------------------------------------- repeated ids
def _sharegpt_with_ids(path: Path, ids: list[str], bad: set[int]) -> Path:
    lines = []
    for i, ident in enumerate(ids):
        answer = "" if i in bad else f"Answer {i}."  # an empty answer is rejected
        lines.append(
            json.dumps(
                {
                    "id": ident,
                    "messages": [
                        {"role": "user", "content": f"Question {i}?"},
                        {"role": "assistant", "content": answer},
                    ],
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_repeated_ids_are_counted_and_reported_also_across_a_resume(tmp_path):
    ids = ["a", "b", "a", "c", "b", "a", "e", "c"]  # record 3 ("c") is rejected: not a repeat
    source = _sharegpt_with_ids(tmp_path / "chats.jsonl", ids, bad={3})
    whole = convert_dataset(source, tmp_path / "whole", "sharegpt", split_ratio="train=1", workers=0)
    assert sum(whole.written.values()) == 7 and whole.rejected == {"empty_answer": 1}
    assert whole.duplicate_ids == 3 and whole.duplicate_id_examples == ("a", "b")
    assert any("3 written record(s) repeat the id" in w and "'a', 'b'" in w for w in whole.warnings)

    out = tmp_path / "stopped"  # stopped at the rejected record, after 1 repeat, then resumed
    with pytest.raises(ConvertError, match="more than --max-rejected 0 allows"):
        convert_dataset(source, out, "sharegpt", split_ratio="train=1", workers=0, max_rejected=0)
    args = [
        "convert",
        str(source),
        str(out),
        "--from",
        "sharegpt",
        "--split-ratio",
        "train=1",
        "--workers",
        "0",
        "--max-rejected",
        "100%",
        "--resume",
        "--json",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["resumed_from"] == 4
    assert (data["duplicate_ids"], data["duplicate_id_examples"]) == (3, ["a", "b"])
    assert tree_bytes(out) == tree_bytes(whole.output)


# ----------------------------------------------------------------------------- too many rejected
def _llava_in_subfolder(root: Path, with_images: int, text_only: int) -> Path:
    """``root/data.json`` whose image paths are relative to ``root/images`` (LLaVA's layout
    with its --image_folder), the text-only records last."""
    (root / "images").mkdir(parents=True)
    records = []
    for i in range(with_images):
        (root / "images" / f"{i:03d}.png").write_bytes(image_bytes("png", (20, 16), i))
        records.append(
            {
                "id": str(i),
                "image": f"{i:03d}.png",
                "conversations": [
                    {"from": "human", "value": f"<image>\nWhat is {i}?"},
                    {"from": "gpt", "value": f"It is {i}."},
                ],
            }
        )
    for i in range(with_images, with_images + text_only):
        records.append(
            {
                "id": str(i),
                "conversations": [{"from": "human", "value": f"Say {i}."}, {"from": "gpt", "value": f"{i}."}],
            }
        )
    (root / "data.json").write_text(json.dumps(records))
    return root / "data.json"


def test_most_records_rejected_fails_with_the_likely_fix(tmp_path, monkeypatch):
    source = _llava_in_subfolder(tmp_path / "src", with_images=28, text_only=2)
    monkeypatch.chdir(source.parent)  # image_folder is relative to the current folder
    runner = CliRunner()

    def convert(out, *extra):
        return runner.invoke(
            cli,
            [
                "convert",
                "data.json",
                str(out),
                "--from",
                "llava-json",
                "--workers",
                "0",
                "--split-ratio",
                "train=1",
                *extra,
            ],
        )

    out = tmp_path / "out"
    failed = convert(out)  # the default: at most 10%
    assert failed.exit_code == 1 and "Traceback" not in failed.output
    assert (
        "28 of 30 records read (93%) were rejected (missing_image: 28), more than "
        "--max-rejected 10% allows" in failed.output
    )
    assert "28 of 30 records (93%) were rejected as missing_image" in failed.output
    assert f"are under {tmp_path / 'src' / 'images'}: pass -o image_folder=images" in failed.output
    # left inspectable and resumable: the report, no index, the state at the end
    assert len(read_report(out / "rejected.jsonl")) == 28 and not (out / ".nv-meta").exists()
    state = json.loads((out / "convert.json").read_text())
    assert state["status"] == "running" and state["checkpoint"]["next_index"] == 30
    fixed = convert(out, "--overwrite", "-o", "image_folder=images")
    assert fixed.exit_code == 0 and "30 written, 0 rejected" in fixed.output

    kept = convert(tmp_path / "kept", "--max-rejected", "100%")  # off: a warning says why
    assert kept.exit_code == 0 and "2 written, 28 rejected" in kept.output
    assert "warning:" in kept.output and "pass -o image_folder=images" in kept.output

    counted = convert(tmp_path / "counted", "--max-rejected", "5")  # a number stops at once
    assert counted.exit_code == 1 and "6 of 6 records read" in counted.output
    assert json.loads((tmp_path / "counted" / "convert.json").read_text())["checkpoint"]["next_index"] == 6
    bad = convert(tmp_path / "bad", "--max-rejected", "0.1")
    assert bad.exit_code == 1 and "max_rejected" in bad.output and "10%" in bad.output


def test_a_stopped_run_resumes_to_the_same_bytes(llava, uninterrupted, tmp_path):
    runner = CliRunner()
    for limit, stopped_at in (("10%", 27), ("2", 10)):  # at the end; at the 3rd bad record
        out = tmp_path / f"out-{limit}"
        stopped = runner.invoke(cli, llava_args(llava, out, "--max-rejected", limit))
        assert stopped.exit_code == 1 and f"more than --max-rejected {limit} allows" in stopped.output
        assert json.loads((out / "convert.json").read_text())["checkpoint"]["next_index"] == stopped_at
        resumed = runner.invoke(cli, llava_args(llava, out, "--resume", "--max-rejected", "30%", "--json"))
        assert resumed.exit_code == 0, resumed.output
        assert json.loads(resumed.stdout)["resumed_from"] == stopped_at
        assert tree_bytes(out) == tree_bytes(uninterrupted.output)


# ----------------------------------------------------------------------------- split shares
def test_split_shares_must_sum_to_one(llava, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "convert",
            str(llava.path),
            str(tmp_path / "out"),
            "--from",
            "llava-json",
            "--split-ratio",
            "train=0.9,val=0.2",
        ],
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--split-ratio 'train=0.9,val=0.2': the shares sum to 1.1, not 1" in result.output
    assert "--split-ratio train=0.8182,val=0.1818" in result.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConvertError, match="sum to 0.5"):
        convert_dataset(llava.path, tmp_path / "o", "llava-json", split_ratio={"train": 0.5})


# ----------------------------------------------------------------------------- resume and the source
def test_a_touched_source_resumes_and_a_changed_one_is_refused(tmp_path):
    source = write_sharegpt_source(tmp_path / "src")  # 15 lines, the first bad one on line 3
    whole = convert_dataset(source.path, tmp_path / "whole", "sharegpt", split_ratio="train=1", workers=0)

    def stop(out):
        with pytest.raises(ConvertError, match="--max-rejected 0"):
            convert_dataset(source.path, out, "sharegpt", split_ratio="train=1", workers=0, max_rejected=0)

    def resume(out):
        return convert_dataset(source.path, out, "sharegpt", split_ratio="train=1", workers=0, resume=True)

    stop(tmp_path / "a")
    later = time.time_ns() + 5 * 10**9
    os.utime(source.path, ns=(later, later))  # touched: same bytes, another time
    assert resume(tmp_path / "a").records == 15
    assert tree_bytes(tmp_path / "a") == tree_bytes(whole.output)

    stop(tmp_path / "b")
    text = source.path.read_text()
    source.path.write_text(text.replace("Describe 0.", "Describe 9."))  # same size, new bytes
    with pytest.raises(ConvertError, match=r"the source changed .*\(chats.jsonl\)"):
        resume(tmp_path / "b")


def test_an_unchanged_source_is_not_hashed_again(tmp_path):
    from energon_plugins.convert.state import check_source, fingerprint

    source = tmp_path / "data.jsonl"
    source.write_text('{"a": 1}\n')
    [row] = fingerprint(source)
    assert len(row[3]) == 64
    bogus = {"fingerprint": [[*row[:3], "0" * 64]]}  # a hash it would not match if it read it
    assert check_source(bogus, source) == [[*row[:3], "0" * 64]]
    os.utime(source, ns=(row[2] + 10**9, row[2] + 10**9))
    with pytest.raises(ConvertError, match="source changed"):  # now it hashes, and differs
        check_source(bogus, source)
    assert check_source({"fingerprint": [row]}, source)[0][2] == row[2] + 10**9


# ----------------------------------------------------------------------------- progress
COUNT_IN_A_FRESH_PROCESS = """
import json, pathlib, sys, time
from energon_plugins.convert.progress import RecordCounter
from energon_plugins.host.api import create
from energon_plugins.host.kinds import SOURCE_FORMAT

name, path, options = sys.argv[1], pathlib.Path(sys.argv[2]), json.loads(sys.argv[3])
reader = create(SOURCE_FORMAT, name, options)
counter = RecordCounter(reader, path, reader.source_files(path))
deadline = time.monotonic() + 60
while counter.poll() is None and counter.result is None and time.monotonic() < deadline:
    time.sleep(0.05)
counter.close()
print(json.dumps(counter.result))
"""


def _count_like_the_cli(name: str, source) -> int | None:
    """The total a ``convert`` process gets: counted by its background child. The count runs
    from a fresh process, as the CLI's does: a forked child of this test process would inherit
    the locks of whatever threads earlier tests left running here."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNT_IN_A_FRESH_PROCESS, name, str(source.path), json.dumps(source.options)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_progress_has_a_total_and_shows_each_step(llava, tmp_path):
    sources = {
        "llava-json": llava,
        "sharegpt": write_sharegpt_source(tmp_path / "sg"),
        "hf-parquet": write_parquet_source(tmp_path / "pq"),
    }
    for name, source in sources.items():  # a JSON array, JSON Lines, parquet footers
        assert _count_like_the_cli(name, source) == len(source.good) + len(source.bad), name

    seen = Recorder()
    result = convert_dataset(
        llava.path,
        tmp_path / "out",
        "llava-json",
        options=llava.options,
        split_ratio=SPLITS,
        shard_size=SHARD,
        workers=0,
        max_rejected="30%",
        progress=seen,
    )
    shards = sum(len(names) for names in result.shards.values())
    assert seen.phases == [
        "hashing the source files (what --resume checks)",
        f"indexing {shards} shards with Energon's prepare API",
    ]
    assert seen.advances[0] == (0, 0) and seen.advances[-1] == (27, 7)
    assert seen.totals in ([], [27])  # the count may finish after so small a conversion


def test_the_display_draws_the_total_and_the_indexing_step():
    from rich.console import Console

    from energon_plugins.cli.convert_progress import ConvertDisplay

    display = ConvertDisplay(animated=True)
    display.console = Console(file=io.StringIO(), force_terminal=True, width=160)
    display.start()
    display.advance(0, 0)
    display.total(27)
    display.advance(20, 3)
    display._bar.refresh()
    drawn = display.console.file.getvalue()
    display.phase("indexing 4 shards with Energon's prepare API")
    display._bar.refresh()
    display.stop()
    assert "converting" in drawn and "20/27" in drawn and "3 rejected" in drawn
    assert "indexing 4 shards" in display.console.file.getvalue()
