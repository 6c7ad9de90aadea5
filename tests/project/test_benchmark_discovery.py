"""``benchmarks/run_all.py`` discovers the benchmarks from their ``BENCHMARK`` declarations.

Every script in a group folder declares one and ``run_all.py --list`` lists it (nothing is
missed, nothing needs an edit of the runner); a new script dropped into a group folder (as
``memory/soak.py`` will be) is found, run with its ``quick`` arguments and its ``"summary"``
rows reach ``latest.json`` / ``latest.md``, once per entry when it declares a list; a bad declaration is refused naming the script and
the field. The runner and its helpers run for real, in a copy of ``benchmarks/`` where the
tests add scripts of their own (the real benchmarks are listed, never run here).
"""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._refusals import assert_refusal, unchanged

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SOAK_DECLARATION = (
    '{"name": "soak", "full": ["--batches", "100000"], "quick": ["--batches", "2000"], "output": "file"}'
)
# A benchmark script as the protocol asks: its arguments, then ``--json PATH`` with a summary.
SOAK_SCRIPT = f'''"""A stand-in for the soak benchmark: echoes its arguments as a figure."""
import json
import sys

BENCHMARK = {SOAK_DECLARATION}

if __name__ == "__main__":
    args = sys.argv[1:]
    path = args[args.index("--json") + 1]
    summary = [["arguments", " ".join(args[: args.index("--json")]), "", None],
               ["growth per 100,000 batches, MB", "0.2", "< 1", True]]
    with open(path, "w") as fh:
        json.dump({{"batches": int(args[1]), "summary": summary}}, fh)
'''


def run_all(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``python ROOT/run_all.py ARGS`` offline; its output captured."""
    return subprocess.run(
        [sys.executable, str(root / "run_all.py"), *args],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def listed(proc: subprocess.CompletedProcess) -> dict[str, str]:
    """``name -> script`` from the lines ``--list`` prints."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split("\t")[:2] for line in proc.stdout.splitlines())


def module_level_names(script: Path) -> set[str]:
    """The names a script assigns at module level."""
    tree = ast.parse(script.read_text())
    return {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


@pytest.fixture
def bench_copy(tmp_path: Path) -> Path:
    """The runner and its private helpers, copied without the real benchmarks."""
    root = tmp_path / "benchmarks"
    root.mkdir()
    shutil.copy(BENCHMARKS / "run_all.py", root)
    shutil.copytree(BENCHMARKS / "_shared", root / "_shared", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_run_all_lists_every_script_of_the_group_folders():
    scripts = sorted(
        path
        for path in BENCHMARKS.glob("*/*.py")
        if not path.parent.name.startswith("_") and not path.name.startswith("_")
    )
    assert len({path.parent for path in scripts}) >= 4, "the scripts live in group folders"
    assert [path.name for path in BENCHMARKS.glob("*.py")] == ["run_all.py"], "scripts go in groups"
    undeclared = [str(path) for path in scripts if "BENCHMARK" not in module_level_names(path)]
    assert not undeclared, f"scripts without a BENCHMARK declaration: {undeclared}"

    proc = run_all(BENCHMARKS, "--list")
    names = listed(proc)
    assert "declares no BENCHMARK" not in proc.stderr
    assert {str(path.relative_to(BENCHMARKS.parent)) for path in scripts} == set(names.values())
    # what run_all used to hold by hand, plus the two it missed
    assert set(names) >= {
        "pipelines",
        "image_processors",
        "loader",
        "memory",
        "cli_startup",
        "overhead",
        "packing",
        "profile",
        "batch_formats",
        "hf_processor",
        "convert",
        "video",
        "validation_heap",
        "convert_long_records",
        "cli_verbs",
    }


def test_a_new_script_in_a_group_folder_is_run_and_its_summary_reaches_latest(bench_copy, tmp_path):
    (bench_copy / "memory").mkdir()
    (bench_copy / "memory" / "soak.py").write_text(SOAK_SCRIPT)
    assert listed(run_all(bench_copy, "--list")) == {"soak": "benchmarks/memory/soak.py"}

    out = tmp_path / "out"
    proc = run_all(bench_copy, "--quick", "--only", "soak", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    latest = json.loads((out / "latest.json").read_text())
    assert latest["benchmarks"]["soak"]["result"]["batches"] == 2000
    assert latest["summary"][:2] == [
        ["soak", "arguments", "--batches 2000", "", ""],
        ["soak", "growth per 100,000 batches, MB", "0.2", "< 1", "yes"],
    ]
    assert latest["summary"][-1][0] == "run"
    assert "| soak | growth per 100,000 batches, MB | 0.2 | < 1 | yes |" in (out / "latest.md").read_text()


def test_a_script_declaring_a_list_runs_once_per_entry(bench_copy, tmp_path):
    second = (
        '{"name": "soak_short", "full": ["--batches", "10"], "quick": ["--batches", "5"], "output": "file"}'
    )
    (bench_copy / "memory").mkdir()
    (bench_copy / "memory" / "soak.py").write_text(
        SOAK_SCRIPT.replace(f"BENCHMARK = {SOAK_DECLARATION}", f"BENCHMARK = [{SOAK_DECLARATION}, {second}]")
    )
    assert listed(run_all(bench_copy, "--list")) == {
        "soak": "benchmarks/memory/soak.py",
        "soak_short": "benchmarks/memory/soak.py",
    }
    out = tmp_path / "out"
    proc = run_all(bench_copy, "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bench = json.loads((out / "latest.json").read_text())["benchmarks"]
    assert {name: r["result"]["batches"] for name, r in bench.items()} == {"soak": 2000, "soak_short": 5}


def test_a_script_without_a_summary_is_an_error_row(bench_copy, tmp_path):
    (bench_copy / "memory").mkdir()
    script = SOAK_SCRIPT.replace('"summary": summary', '"figures": summary')
    (bench_copy / "memory" / "soak.py").write_text(script)
    out = tmp_path / "out"
    proc = run_all(bench_copy, "--quick", "--out", str(out))
    assert proc.returncode == 1
    rows = json.loads((out / "latest.json").read_text())["summary"]
    assert rows[0][:2] == ["soak", "ERROR"] and '"summary"' in rows[0][2] and rows[0][4] == "NO"


def test_private_folders_and_files_and_undeclared_scripts_are_not_benchmarks(bench_copy):
    (bench_copy / "memory").mkdir()
    (bench_copy / "memory" / "_helper.py").write_text(f"BENCHMARK = {SOAK_DECLARATION}\n")
    (bench_copy / "memory" / "notes.py").write_text("FIGURES = {}\n")
    proc = run_all(bench_copy, "--list")
    assert listed(proc) == {}  # _shared/*.py and memory/_helper.py are private
    assert "benchmarks/memory/notes.py declares no BENCHMARK" in proc.stderr


BAD_DECLARATIONS = {
    "quick is not a list": (
        '{"name": "soak", "full": [], "quick": "--quick", "output": "file"}',
        ["memory/soak.py", "field quick"],
    ),
    "unknown output": (
        '{"name": "soak", "full": [], "quick": [], "output": "json"}',
        ["memory/soak.py", "field output", "'file' or 'stdout'"],
    ),
    "no name": ('{"full": [], "quick": [], "output": "file"}', ["memory/soak.py", "field name"]),
    "a key the protocol does not know": (
        '{"name": "soak", "full": [], "quick": [], "output": "file", "timeout": 60}',
        ["memory/soak.py", "field timeout"],
    ),
    "a list entry that is not a dict": (
        '[{"name": "soak", "full": [], "quick": [], "output": "file"}, "soak-2"]',
        ["memory/soak.py", "BENCHMARK[1]"],
    ),
    "not a literal": ('dict(name="soak")', ["memory/soak.py", "line 1", "literal"]),
    "an argument that is not a string": (
        '{"name": "soak", "full": ["--batches", 100000], "quick": [], "output": "file"}',
        ["memory/soak.py", "field full.1"],
    ),
}


@pytest.mark.bad_input
@pytest.mark.parametrize("declaration, names", BAD_DECLARATIONS.values(), ids=BAD_DECLARATIONS.keys())
def test_a_bad_declaration_is_refused_naming_the_script_and_the_field(bench_copy, declaration, names):
    (bench_copy / "memory").mkdir()
    (bench_copy / "memory" / "soak.py").write_text(f"BENCHMARK = {declaration}\n")
    with unchanged(bench_copy):
        proc = run_all(bench_copy, "--list")
    assert proc.returncode == 2 and proc.stdout == ""
    assert_refusal(proc.stderr, *names)


@pytest.mark.bad_input
def test_a_name_declared_twice_is_refused_naming_both_scripts(bench_copy):
    for group in ("memory", "throughput"):
        (bench_copy / group).mkdir()
        (bench_copy / group / "soak.py").write_text(f"BENCHMARK = {SOAK_DECLARATION}\n")
    proc = run_all(bench_copy, "--list")
    assert proc.returncode == 2
    assert_refusal(proc.stderr, "'soak' declared twice", "memory/soak.py", "throughput/soak.py")
