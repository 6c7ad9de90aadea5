"""``convert --part K/N`` on N processes at once, then ``convert merge``, against one ``convert``.

Run: ``python benchmarks/convert/parts.py [--records 8000] [--parts 1,2,4] [--json out.json]``.

The input is the one ``benchmarks/convert/convert.py`` generates (a LLaVA JSON array over a
pool of 320x240 JPEGs, ``--bad`` percent of records with a missing image). Every side runs the
command line as fresh processes, imports included:

- **one run**: ``energon-plugins convert SOURCE OUT`` with its default workers (one per CPU);
- **N parts**: ``convert ... --part K/N`` for K = 1..N started at once, each with
  ``max(1, CPUs // N)`` workers (the same CPUs in all), then ``convert merge``.

Figures: records per second of the whole source (wall: the slowest part plus the merge), the
ratio to one run measured in the same invocation, and the merge's share of the time. On one
machine the parts share its CPUs, so the ratio shows the cost of splitting (each part scans the
whole source, the merge copies the shards and indexes them); on N machines the parts' wall
time divides by about N. Every merged dataset is checked to hold the same shard bytes as
the one run.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _shared.common import print_table, summary_row, write_json
from _shared.processes import cli_command

BENCHMARK = {
    "name": "convert_parts",
    "full": ["--records", "8000"],
    "quick": ["--records", "200", "--parts", "1,2"],
    "output": "file",
}

SHARD = "16MB"
"""Small enough that the dataset has several shards per split, as at scale."""


def generate(root: Path, records: int, bad_percent: float) -> Path:
    """The input of ``benchmarks/convert/convert.py`` (its own generator, loaded from it)."""
    spec = importlib.util.spec_from_file_location("_convert_benchmark", HERE / "convert.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate(root, records, bad_percent)


def convert_args(source: Path, out: Path, workers: int | None, *extra: str) -> list[str]:
    """The ``convert`` command line for ``source`` into ``out``."""
    args = [*cli_command(), "convert", str(source), str(out), "--from", "llava-json"]
    args += [
        "-o",
        f"image_folder={source.parent / 'images'}",
        "--shard-size",
        SHARD,
        "--max-rejected",
        "100%",
    ]
    return args + ([] if workers is None else ["--workers", str(workers)]) + list(extra)


def run_all(commands: list[list[str]]) -> float:
    """Start every command at once; the wall seconds until the last one ends."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "HF_HUB_OFFLINE": "1"}
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"):
        env.pop(name, None)
    start = time.perf_counter()
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for cmd in commands
    ]
    for cmd, proc in zip(commands, procs, strict=True):
        _, err = proc.communicate(timeout=3600)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{err.decode()[-3000:]}")
    return time.perf_counter() - start


def shard_bytes(out: Path) -> dict[str, bytes]:
    """The shards and the report: what a merge must write byte for byte as one run."""
    return {p.name: p.read_bytes() for p in [*sorted(out.glob("*.tar")), out / "rejected.jsonl"]}


def measure(root: Path, source: Path, records: int, counts: list[int]) -> dict:
    """One run, then each number of parts; the figures."""
    cpus = len(os.sched_getaffinity(0))
    one = run_all([convert_args(source, root / "one", None)])
    expected = shard_bytes(root / "one")
    rows = [["one run", "-", cpus, round(one, 2), "-", round(records / one, 1), 1.0]]
    runs = {"one": {"seconds": round(one, 2), "records_per_s": round(records / one, 1)}}
    for count in counts:
        workers = max(1, cpus // count)
        folders = [root / f"{count}-{number}" for number in range(1, count + 1)]
        parts = run_all(
            [
                convert_args(source, folder, workers, "--part", f"{n}/{count}")
                for n, folder in enumerate(folders, 1)
            ]
        )
        merged = root / f"merged-{count}"
        merge = run_all(
            [[*cli_command(), "convert", "merge", *map(str, folders), str(merged), "--max-rejected", "100%"]]
        )
        if shard_bytes(merged) != expected:
            raise SystemExit(f"{count} parts merged are not byte-identical to one run")
        rate = records / (parts + merge)
        runs[str(count)] = {
            "workers_per_part": workers,
            "parts_seconds": round(parts, 2),
            "merge_seconds": round(merge, 2),
            "records_per_s": round(rate, 1),
            "ratio_to_one_run": round(rate / runs["one"]["records_per_s"], 2),
            "identical_shards": True,
        }
        rows.append(
            [f"{count} parts + merge", count, workers, round(parts, 2), round(merge, 2), round(rate, 1)]
        )
        rows[-1].append(runs[str(count)]["ratio_to_one_run"])
    print_table(
        f"convert: {records} LLaVA records, N parts at once on this machine ({cpus} CPUs) vs one run",
        ["side", "parts", "workers each", "convert wall s", "merge wall s", "records/s", "x one run"],
        rows,
    )
    return {
        "records": records,
        "cpus": cpus,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "runs": runs,
    }


def main(argv=None) -> int:
    """Generate the input, run every side, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=8000)
    parser.add_argument("--parts", default="1,2,4", help="numbers of parts, comma-separated")
    parser.add_argument("--bad", type=float, default=1.0, help="percent of records with a missing image")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.parts.split(",") if n.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = generate(root / "src", args.records, args.bad)
        figures = measure(root, source, args.records, counts)
    summary = [
        summary_row(
            f"records/s, {count} parts at once + merge / one run ({figures['cpus']} CPUs, {args.records} records)",
            f"{figures['runs'][str(count)]['records_per_s']} / {figures['runs']['one']['records_per_s']} "
            f"({figures['runs'][str(count)]['ratio_to_one_run']}x; merge "
            f"{figures['runs'][str(count)]['merge_seconds']} s); shards byte-identical",
        )
        for count in counts
    ]
    print("\n".join(f"{row[0]}: {row[1]}" for row in summary))
    if args.json:
        write_json(args.json, "convert_parts", {**figures, "summary": summary})
    else:
        print(json.dumps(figures["runs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
