"""Run every benchmark in one go; write ``results/latest.json`` and ``results/latest.md``.

Run: ``python benchmarks/run_all.py [--quick] [--only NAME ...] [--list] [--out DIR]`` (``make bench``).

Benchmarks are discovered, not listed here (:mod:`_shared.discovery`): every
``benchmarks/<group>/<name>.py`` (neither private) that declares ``BENCHMARK = {"name", "full",
"quick", "output"}`` (or a list of such) at module level, read without importing the script;
the protocol is in ``README.md``. Each runs as its own process and prints its own tables; this runner collects the JSON each
writes, concatenates their ``"summary"`` rows, adds each script's wall time and the run's peak
resident memory (the largest ``ru_maxrss`` of any finished child process, loader workers
included), prints the summary and writes both files. ``--quick``: the ``quick`` arguments.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _shared.common import print_table
from _shared.discovery import Declaration, DeclarationError, discover

COLUMNS = ["benchmark", "figure", "value", "goal", "met"]


def run_one(benchmark: Declaration, quick: bool, env: dict[str, str]) -> dict[str, Any]:
    """Run one benchmark; return its JSON (or an error), wall seconds and return code."""
    args = benchmark.quick if quick else benchmark.full
    script = str(benchmark.script.relative_to(HERE.parent))
    print(f"\n=== {benchmark.name}: {script} {' '.join(args)}", flush=True)
    stdout = benchmark.output == "stdout"
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "result.json"
        cmd = [sys.executable, str(benchmark.script), *args, "--json", *([] if stdout else [str(out_file)])]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE if stdout else None)
        seconds = round(time.perf_counter() - start, 1)
        record: dict[str, Any] = {"script": script, "seconds": seconds, "returncode": proc.returncode}
        try:
            if stdout:
                record["result"] = json.loads(proc.stdout)
                print(json.dumps(record["result"], indent=2))
            elif out_file.exists():
                record["result"] = json.loads(out_file.read_text())
        except ValueError as exc:
            record["error"] = f"unreadable JSON: {exc}"
    result = record.get("result")
    rows = result.get("summary") if isinstance(result, dict) else None
    if proc.returncode != 0:
        record["error"] = f"exit status {proc.returncode}"
    elif "result" not in record:
        record.setdefault("error", "no JSON written")
    elif not isinstance(rows, list) or not all(isinstance(row, list) and len(row) == 4 for row in rows):
        record["error"] = 'no "summary": [[figure, value, goal, met], ...] in its JSON'
    return record


def summary_rows(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    """``[benchmark, figure, value, goal, met]`` rows: each script's own ``summary``, then errors."""
    rows = [
        [name, figure, str(value), goal, "" if met is None else ("yes" if met else "NO")]
        for name, record in results.items()
        if not record.get("error")
        for figure, value, goal, met in record["result"]["summary"]
    ]
    return rows + [[name, "ERROR", r["error"], "", "NO"] for name, r in results.items() if r.get("error")]


def markdown(rows: list[list[str]], header: dict[str, Any]) -> str:
    """The summary as a markdown table, with the run's context on top."""
    lines = [
        "# Benchmark results",
        "",
        f"Measured {header['measured_at']} on {header['platform']} ({header['cpus']} CPUs, "
        f"load average {header['load_average']}), Python {header['python']}, "
        f"{'quick (smoke) run' if header['quick'] else 'full run'}, {header['seconds']} s.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    seconds = ", ".join(f"{name} {sec}" for name, sec in header["script_seconds"].items())
    return "\n".join([*lines, "", f"Seconds per script: {seconds}.", ""])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print the summary, write the two files; exit 1 if a script failed."""
    try:
        benchmarks, undeclared = discover()
    except DeclarationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for script in undeclared:
        print(f"warning: {script.relative_to(HERE.parent)} declares no BENCHMARK: not run", file=sys.stderr)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", nargs="+", choices=sorted(benchmarks), help="run only these")
    parser.add_argument("--list", action="store_true", help="print the discovered benchmarks; run none")
    parser.add_argument("--out", default=str(HERE / "results"), help="where latest.* are written")
    args = parser.parse_args(argv)
    if args.list:
        for name, benchmark in benchmarks.items():
            print(f"{name}\t{benchmark.script.relative_to(HERE.parent)}\t{benchmark.output}")
        return 0

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.setdefault("PYTHONWARNINGS", "ignore")
    started = time.perf_counter()
    results = {name: run_one(benchmarks[name], args.quick, env) for name in args.only or benchmarks}
    seconds = round(time.perf_counter() - started, 1)
    peak_memory = {
        f"{who}_peak_rss_mb": round(resource.getrusage(rusage).ru_maxrss / 1024, 1)
        for who, rusage in (("largest_child", resource.RUSAGE_CHILDREN), ("runner", resource.RUSAGE_SELF))
    }
    header = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "quick": args.quick,
        "seconds": seconds,
        "script_seconds": {n: r.get("seconds") for n, r in results.items()},
    }
    peak = ["run", "peak resident memory of any benchmark process (incl. loader workers)"]
    rows = [*summary_rows(results), [*peak, f"{peak_memory['largest_child_peak_rss_mb']} MiB", "", ""]]
    print()
    print_table(f"Summary ({seconds} s)", COLUMNS, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    latest = {**header, "peak_memory": peak_memory, "summary": rows, "benchmarks": results}
    (out / "latest.json").write_text(json.dumps(latest, indent=2) + "\n")
    (out / "latest.md").write_text(markdown(rows, header))
    print(f"wrote {out / 'latest.json'} and {out / 'latest.md'}")
    return 1 if any(r.get("error") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
