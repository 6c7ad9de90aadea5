"""CLI start-up cost: ``energon-plugins list`` against ``python -c pass``.

Both are run as fresh processes in the same session, alternating, several times each; the
medians and their ratio are printed (goal: ratio <= 3). ``list`` loads every installed plugin's
registration (entry points, names, descriptions) but must not import torch, transformers,
megatron or pydantic (options models are imported when a plugin is built, validated or
shown), nor rich (its table is plain text); the script also checks that with a third probe.
Modules are byte-compiled first, as after ``pip install`` (``PYTHONDONTWRITEBYTECODE`` is
dropped for the runs).

Usage: python benchmarks/cli_startup.py [--runs N] [--json]
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "transformers", "megatron", "pydantic", "rich")


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("energon-plugins")
    if script.exists():
        return [str(script)]
    found = shutil.which("energon-plugins")
    return [found] if found else [sys.executable, "-m", "energon_plugins"]


_cpu: dict[str, list[float]] = {}
"""CPU seconds (user + system) of each command's child process, by command line."""


def _time(cmd: list[str], env: dict[str, str]) -> float:
    """Wall time of one run of ``cmd``; its CPU time is recorded in :data:`_cpu`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    _cpu.setdefault(" ".join(cmd), []).append(cpu)
    return wall


def heavy_modules_after_list(env: dict[str, str]) -> list[str]:
    """The heavy top-level modules imported by running ``list`` in-process (should be none)."""
    code = (
        "import sys, io, contextlib\n"
        "from energon_plugins.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['list'])\n    except SystemExit:\n        pass\n"
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    return [m for m in out.split(",") if m]


BREAKDOWN = {
    "python -c pass": "pass",
    "import click": "import click",
    "import rich.table (not on the list path)": "import rich.console, rich.table",
    "import importlib.metadata": "import importlib.metadata",
    "import pydantic (not on the list path)": "import pydantic",
    "import energon_plugins": "import energon_plugins",
    "+ load the registry": "import energon_plugins; energon_plugins.get_registry()",
}
"""Probes that show where the start-up time goes (each a fresh interpreter)."""


def measure(runs: int = 7) -> dict:
    """Median wall times of both commands over ``runs`` alternating runs, and their ratio."""
    # As after ``pip install``: modules byte-compiled (the warm-up runs write the .pyc files of
    # editable installs; with PYTHONDONTWRITEBYTECODE every run would compile them again).
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    baseline_cmd = [sys.executable, "-c", "pass"]
    cli_cmd = [*_cli(), "list"]
    probes = {label: [sys.executable, "-c", code] for label, code in BREAKDOWN.items()}
    _time(baseline_cmd, env)  # warm the file-system cache for both
    _time(cli_cmd, env)
    baseline, cli = [], []
    probe_times: dict[str, list[float]] = {label: [] for label in probes}
    for _ in range(runs):
        baseline.append(_time(baseline_cmd, env))
        cli.append(_time(cli_cmd, env))
        for label, cmd in probes.items():
            probe_times[label].append(_time(cmd, env))
    base_median = statistics.median(baseline)
    cli_median = statistics.median(cli)
    base_cpu = statistics.median(_cpu[" ".join(baseline_cmd)][1:])
    cli_cpu = statistics.median(_cpu[" ".join(cli_cmd)][1:])
    return {
        "baseline_cpu_median_s": round(base_cpu, 4),
        "cli_cpu_median_s": round(cli_cpu, 4),
        "cpu_ratio": round(cli_cpu / base_cpu, 2) if base_cpu else None,
        "breakdown_median_s": {
            label: round(statistics.median(times), 4) for label, times in probe_times.items()
        },
        "runs": runs,
        "baseline_command": " ".join(baseline_cmd),
        "cli_command": " ".join(cli_cmd),
        "baseline_median_s": round(base_median, 4),
        "cli_median_s": round(cli_median, 4),
        "ratio": round(cli_median / base_median, 2),
        "goal_ratio": 3.0,
        "heavy_modules_imported_by_list": heavy_modules_after_list(env),
    }


def main() -> None:
    """Print the measurement (a table, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"CLI start-up, median of {result['runs']} runs each:")
    print(f"  {result['baseline_command']:<60} {result['baseline_median_s'] * 1000:8.1f} ms")
    print(f"  {result['cli_command'][-60:]:<60} {result['cli_median_s'] * 1000:8.1f} ms")
    verdict = "meets" if result["ratio"] <= result["goal_ratio"] else "misses"
    print(f"  ratio {result['ratio']:.2f} ({verdict} the goal <= {result['goal_ratio']:.0f})")
    print(f"  CPU time (user+sys), less sensitive to a busy machine: "
          f"{result['baseline_cpu_median_s'] * 1000:.1f} ms vs {result['cli_cpu_median_s'] * 1000:.1f} ms, "
          f"ratio {result['cpu_ratio']:.2f}")
    print("  where the time goes (fresh interpreters, medians):")
    for label, seconds in result["breakdown_median_s"].items():
        print(f"    {label:<30} {seconds * 1000:8.1f} ms")
    heavy = result["heavy_modules_imported_by_list"]
    print(f"  heavy modules imported by list: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
