"""``convert --part K/N`` and ``convert merge`` (issue 29), on real conversions.

The source has rejected records and repeated ids spread through it, so each part's samples
and shard boundaries differ from one run's. For N = 1, 2, 3 the parts, merged in any order,
give the same shards, ``.tar.idx`` files, report and ``.nv-meta`` files, byte for byte, as
one run. What legitimately differs: ``.nv-meta/index.uuid`` (Energon's prepare draws a random
one each time, also for two single runs), ``convert.json`` (timings, and the merge's
``merged_from``), and ``.nv-meta/index.sqlite`` when the index is built by several processes
(Energon's prepare inserts each shard's rows as its worker finishes: the same rows in another
order, as for two single runs; with one indexing process it is byte-identical too). Once the parts run as separate processes of the command line, picked by
Slurm's job-array variables. ``merge`` refuses, naming the folder: a part missing or given
twice, parts of another N, source or settings, a folder that is not a finished part, an
output that exists (``--overwrite`` replaces an earlier conversion only), too many rejected
records over all parts. A part resumes like a whole run, and only as the same part.
"""

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import megatron.energon  # noqa: F401 - imported once: each conversion's forked indexing inherits it
import pytest
from click.testing import CliRunner

from energon_plugins import convert_dataset
from energon_plugins.cli import cli
from energon_plugins.convert.merge import merge_parts
from energon_plugins.convert.parts import Part, parse_part, part_from_slurm
from energon_plugins.errors import ConvertError
from tests._convert_sources import SHARD, SPLITS, llava_args, write_llava_source
from tests._refusals import assert_refusal, unchanged

REPO = Path(__file__).resolve().parents[2]
SLURM_ARRAY = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
)
NO_SLURM: dict[str, str | None] = dict.fromkeys(SLURM_ARRAY)
"""CliRunner's ``env``: no job-array variables (a test run inside a Slurm array job is not a part)."""
SAME_EVERYWHERE = ("split.yaml", "dataset.yaml", ".info.json")
"""The ``.nv-meta`` files a merge writes byte for byte as one run does (``index.sqlite`` too,
when both are indexed by one process)."""
RESULT_FIELDS = ("records", "written", "shards", "rejected", "empty_splits", "duplicate_ids")
RESULT_FIELDS += ("duplicate_id_examples", "warnings")


def dataset_bytes(output: Path, *, index_bytes: bool = True) -> dict[str, bytes]:
    """Every shard, ``.tar.idx``, the report and the ``.nv-meta`` files that must be identical
    (``index.sqlite`` as bytes, or as its sorted rows without ``index_bytes``)."""
    names = [*output.glob("*.tar"), *output.glob("*.tar.idx"), output / "rejected.jsonl"]
    names += [output / ".nv-meta" / name for name in SAME_EVERYWHERE]
    found = {str(path.relative_to(output)): path.read_bytes() for path in names}
    index = output / ".nv-meta" / "index.sqlite"
    found["index"] = index.read_bytes() if index_bytes else repr(index_rows(index)).encode()
    return found


def index_rows(path: Path) -> dict[str, list[tuple]]:
    """Every table of Energon's ``index.sqlite``, its rows sorted."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: sorted(db.execute(f"SELECT * FROM {table}")) for table in sorted(tables)}


def api_kwargs(source) -> dict:
    return dict(options=source.options, split_ratio=SPLITS, shard_size=SHARD, workers=0)


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env={**NO_SLURM, **(env or {})})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The LLaVA source of test_convert (27 records, 7 bad) plus its records 1-11 again (3 of
    them bad, at other positions modulo 3): 38 records, 10 rejected, 8 repeated ids."""
    written = write_llava_source(tmp_path_factory.mktemp("parts") / "src")
    records = json.loads(written.path.read_text())
    records += [dict(record) for record in records[1:12]]
    written.path.write_text(json.dumps(records, indent=1))
    return written


@pytest.fixture(scope="module")
def whole(source, tmp_path_factory):
    """The source converted in one run: what every merge must equal."""
    return convert_dataset(
        source.path, tmp_path_factory.mktemp("whole") / "out", "llava-json", **api_kwargs(source)
    )


def convert_parts(source, root: Path, count: int, **extra) -> list[Path]:
    """Parts 1..count of ``source`` in ``root/COUNT-K`` (in-process)."""
    folders = []
    for number in range(1, count + 1):
        kwargs = {**api_kwargs(source), **extra}
        result = convert_dataset(
            source.path, root / f"{count}-{number}", "llava-json", part=f"{number}/{count}", **kwargs
        )
        assert result.part == f"{number}/{count}"
        folders.append(result.output)
    return folders


# ----------------------------------------------------------------------------- byte-identical
@pytest.mark.parametrize("count", [1, 2, 3])
def test_parts_then_merge_equal_one_run_byte_for_byte(source, whole, tmp_path, count):
    assert whole.rejected_total == 10 and whole.duplicate_ids == 8 and len(whole.shards["train"]) > 2
    folders = convert_parts(source, tmp_path, count)
    if count > 1:  # each part cut its own shards: the merge re-cuts them as one run does
        assert (folders[0] / "train-000000.tar").read_bytes() != (
            whole.output / "train-000000.tar"
        ).read_bytes()
        assert not (folders[0] / ".nv-meta").exists()
    merged = merge_parts(folders[::-1], tmp_path / "merged", workers=0)  # any order; one indexer
    assert dataset_bytes(merged.output) == dataset_bytes(whole.output)
    assert {f"{name}.idx" for name in dataset_bytes(whole.output) if name.endswith(".tar")} <= set(
        dataset_bytes(merged.output)
    )
    for field in RESULT_FIELDS:
        assert getattr(merged, field) == getattr(whole, field), field
    assert merged.merged_parts == count
    # what legitimately differs: a random uuid, and the state's timings and merged_from
    uuids = [(out / ".nv-meta" / "index.uuid").read_text() for out in (merged.output, whole.output)]
    assert uuids[0] != uuids[1]
    state = json.loads((merged.output / "convert.json").read_text())
    assert state["status"] == "done" and state["merged_from"] == [str(f) for f in folders]
    assert state["settings"] == json.loads((whole.output / "convert.json").read_text())["settings"]


def test_parts_in_separate_processes_picked_by_slurm_then_merge(source, whole, tmp_path):
    """An ``sbatch --array=3-4`` job's two tasks, run at once by the command line (with
    ``--resume``, as the docs' script: on a new folder it starts), then merge."""
    procs = []
    for task in (3, 4):
        env = {k: v for k, v in os.environ.items() if k not in SLURM_ARRAY}
        env.update(SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="3")
        env.update(SLURM_ARRAY_TASK_COUNT="2", PYTHONPATH=str(REPO))
        args = llava_args(source, tmp_path / f"part-{task}", "--max-rejected", "100%", "--json", "--resume")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "energon_plugins", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for task, proc in zip((3, 4), procs, strict=True):
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert json.loads(out)["part"] == f"{task - 2}/2"
        assert f"part {task - 2}/2 from the Slurm job array (SLURM_ARRAY_TASK_ID={task}" in err
    merged = subprocess.run(
        [sys.executable, "-m", "energon_plugins", "convert", "merge", str(tmp_path / "part-4")]
        + [str(tmp_path / "part-3"), str(tmp_path / "merged"), "--max-rejected", "100%"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert merged.returncode == 0, merged.stderr
    assert "merged from 2 parts" in merged.stdout
    # indexed by one process per CPU (the default), the whole run by one: rows compared
    assert dataset_bytes(tmp_path / "merged", index_bytes=False) == dataset_bytes(
        whole.output, index_bytes=False
    )


# ----------------------------------------------------------------------------- resume, overwrite
def test_a_part_resumes_as_the_same_part_only(source, whole, tmp_path):
    folders = convert_parts(source, tmp_path, 3)
    stopped = tmp_path / "stopped"  # part 3/3 holds the rejected records 29, 32 and 35
    with pytest.raises(ConvertError, match="more than --max-rejected 1 allows"):
        kwargs = {**api_kwargs(source), "max_rejected": "1", "checkpoint_every": 2}
        convert_dataset(source.path, stopped, "llava-json", part="3/3", **kwargs)
    state = json.loads((stopped / "convert.json").read_text())
    assert state["part"] == {"number": 3, "count": 3} and state["checkpoint"]["next_index"] == 33
    args = llava_args(source, stopped, "--resume", "--max-rejected", "100%")
    with unchanged(stopped):
        for extra in (["--part", "1/3"], [], ["--part", "none"]):
            result = run(*args, *extra)
            assert result.exit_code == 1, result.output
            assert_refusal(result.output, str(stopped), "holds part 3/3 of a conversion", "--part 3/3")
        result = run("convert", "merge", *map(str, folders[:2]), str(stopped), str(tmp_path / "m"))
        assert result.exit_code == 1
        assert_refusal(result.output, str(stopped), "part 3/3 is not finished", "--resume")
    result = run(*args, "--part", "3/3")
    assert result.exit_code == 0, result.output
    assert "12 records of part 3/3 read" in result.output and "convert merge" in result.output
    merged = merge_parts([*folders[:2], stopped], tmp_path / "merged", workers=0)
    assert dataset_bytes(merged.output) == dataset_bytes(whole.output)
    with pytest.raises(ConvertError, match="holds a whole conversion"):  # and the other way round
        convert_dataset(
            source.path, whole.output, "llava-json", part="1/3", resume=True, **api_kwargs(source)
        )


def test_merge_overwrites_an_earlier_conversion_only_with_overwrite(source, whole, tmp_path):
    folders = convert_parts(source, tmp_path, 2)
    out = tmp_path / "out"
    convert_dataset(
        source.path, out, "llava-json", **{**api_kwargs(source), "split_ratio": "train=0.5,val=0.5"}
    )
    (out / "README.md").write_text("mine\n")
    with unchanged(out):
        result = run("convert", "merge", *map(str, folders), str(out), "--max-rejected", "100%")
    assert result.exit_code == 1
    assert_refusal(result.output, str(out), "holds an earlier conversion", "--overwrite")
    result = run(
        "convert",
        "merge",
        *map(str, folders),
        str(out),
        "--max-rejected",
        "100%",
        "--overwrite",
        "--workers",
        "0",
    )
    assert result.exit_code == 0, result.output
    assert "--overwrite: removing" in result.output and "(kept: README.md)" in result.output
    assert dataset_bytes(out) == dataset_bytes(whole.output)
    assert (out / "README.md").read_text() == "mine\n"  # and no shard of the earlier one (above)


# ----------------------------------------------------------------------------- merge refusals
@pytest.fixture(scope="module")
def folders(source, whole, tmp_path_factory) -> dict[str, Path]:
    """Parts of 2 and 3, and folders that do not belong with them."""
    root = tmp_path_factory.mktemp("refusals")
    two, three = convert_parts(source, root, 2), convert_parts(source, root, 3)
    other = root / "other-src" / "data.json"  # another source (the records reversed), same images
    other.parent.mkdir()
    other.write_text(json.dumps(json.loads(source.path.read_text())[::-1]))
    found = {"1/2": two[0], "2/2": two[1], "1/3": three[0], "2/3": three[1], "whole": whole.output}
    kwargs = {**api_kwargs(source), "shard_size": "32KiB"}
    found["2/2 settings"] = convert_dataset(
        source.path, root / "big", "llava-json", part="2/2", **kwargs
    ).output
    found["2/2 source"] = convert_dataset(
        other, root / "other", "llava-json", part="2/2", **api_kwargs(source)
    ).output
    with pytest.raises(ConvertError):
        convert_dataset(
            source.path, root / "stop", "llava-json", part="2/2", max_rejected="0", **api_kwargs(source)
        )
    found["2/2 stopped"] = root / "stop"
    found["1/2 copy"] = root / "copy"
    shutil.copytree(two[0], found["1/2 copy"])
    found["notes"] = root / "notes"
    found["notes"].mkdir()
    (found["notes"] / "todo.txt").write_text("not a part\n")
    found["merged"] = merge_parts(two, root / "merged").output
    found["root"] = root
    return found


REFUSALS = [
    # (part folders, output, extra arguments, what the message names: folder keys and text)
    (["1/2"], "new", [], ["1/2"], "part 2/2 missing"),
    (["1/2", "1/2", "2/2"], "new", [], ["1/2"], "is given twice"),
    (["1/2", "1/2 copy", "2/2"], "new", [], ["1/2", "1/2 copy"], "are both part 1/2"),
    (["1/2", "2/3"], "new", [], ["1/2", "2/3"], "is part 2/3 but"),
    (["1/2", "2/2 settings"], "new", [], ["2/2 settings", "1/2"], "shard_size"),
    (["1/2", "2/2 source"], "new", [], ["2/2 source", "1/2"], "another source"),
    (["whole", "2/2"], "new", [], ["whole"], "a whole conversion"),
    (["notes", "2/2"], "new", [], ["notes"], "holds no convert.json"),
    (["1/2", "2/2 stopped"], "new", [], ["2/2 stopped"], "is not finished"),
    (["1/2", "2/2"], "merged", [], ["merged"], "holds an earlier conversion"),
    (["1/2", "2/2"], "notes", ["--overwrite"], ["notes"], "holds no convert.json"),
    (["1/2", "2/2"], "1/2", ["--overwrite"], ["1/2"], "must not be a part folder"),
    (["1/2", "2/2"], "new", ["--max-rejected", "10%"], [], "were rejected over all parts"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("parts", "output", "extra", "named", "text"), REFUSALS, ids=[r[-1] for r in REFUSALS]
)
def test_merge_refuses_parts_that_do_not_make_one_dataset(folders, parts, output, extra, named, text):
    target = folders["root"] / "new-output" if output == "new" else folders[output]
    if "--max-rejected" not in extra:
        extra = [*extra, "--max-rejected", "100%"]
    with unchanged(folders["root"]):
        result = run("convert", "merge", *(str(folders[name]) for name in parts), str(target), *extra)
    assert result.exit_code == 1, result.output
    assert_refusal(result.output, text, *(str(folders[name]) for name in named))
    assert not (folders["root"] / "new-output").exists()


# ----------------------------------------------------------------------------- --part, Slurm
BAD_PARTS = ["0/2", "3/2", "x", "1/0", "1/2/3", "-1/2", "", "2"]


@pytest.mark.bad_input
@pytest.mark.parametrize("value", BAD_PARTS)
def test_a_bad_part_is_a_usage_error(source, tmp_path, value):
    result = run(*llava_args(source, tmp_path / "out", "--part", value))
    assert result.exit_code == 2, result.output
    assert_refusal(result.output, "Invalid value for '--part'", repr(value), "K/N", one_paragraph=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConvertError, match="K/N"):
        parse_part(value)


@pytest.mark.parametrize(
    ("env", "part"),
    [
        ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "3"}, "2/3"),
        ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "3"}, "3/3"),
        ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "1"}, "1/1"),
    ],
)
def test_slurm_array_variables_pick_the_part(source, tmp_path, env, part):
    result = run(*llava_args(source, tmp_path / "out", "--max-rejected", "100%"), env=env)
    assert result.exit_code == 0, result.output
    assert f"part {part} from the Slurm job array" in result.output and "--part none" in result.output
    assert Part.from_json(json.loads((tmp_path / "out" / "convert.json").read_text())["part"]) == parse_part(
        part
    )


def test_part_given_or_none_wins_over_slurm(source, tmp_path):
    env = {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "4"}
    result = run(*llava_args(source, tmp_path / "a", "--max-rejected", "100%", "--part", "2/2"), env=env)
    assert result.exit_code == 0 and "Slurm" not in result.output
    assert json.loads((tmp_path / "a" / "convert.json").read_text())["part"] == {"number": 2, "count": 2}
    result = run(*llava_args(source, tmp_path / "b", "--max-rejected", "100%", "--part", "none"), env=env)
    assert result.exit_code == 0 and "part" not in json.loads((tmp_path / "b" / "convert.json").read_text())
    assert (tmp_path / "b" / ".nv-meta" / "split.yaml").is_file()
    assert part_from_slurm({"SLURM_ARRAY_TASK_ID": "3"}) is None  # not an array job without a count


BAD_SLURM = [
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "3"}, "SLURM_ARRAY_TASK_ID=7"),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "3"}, "MIN=4"),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "3"}, "STEP=2"),
    ({"SLURM_ARRAY_TASK_ID": "one", "SLURM_ARRAY_TASK_COUNT": "3"}, "SLURM_ARRAY_TASK_ID=one"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("env", "named"), BAD_SLURM, ids=[named for _, named in BAD_SLURM])
def test_slurm_variables_that_name_no_part_are_refused(source, tmp_path, env, named):
    result = run(*llava_args(source, tmp_path / "out"), env=env)
    assert result.exit_code == 1, result.output
    assert_refusal(result.output, "Slurm job array", named, "--part K/N")
    assert not (tmp_path / "out").exists()


def test_convert_help_lists_merge():
    result = run("convert", "--help")
    assert result.exit_code == 0 and "--part K/N" in result.output
    assert "Commands:" in result.output and "merge" in result.output.split("Commands:")[1]
    result = run("convert", "merge", "--help")
    assert "convert merge [OPTIONS] PART... OUTPUT" in result.output
