"""The verbs' own times: what the README promises, each verb a fresh process on the demo data.

The demo data is written first into a temporary folder; ``examples/minimal.yaml`` is the config.
Median of ``--runs`` runs: ``--help``, ``list``, ``validate --quick CONFIG`` (the config itself)
and ``validate CONFIG`` (the components opened too), and ``demo``: the seconds to its first
output on a terminal (stderr on a pseudo-terminal: the start-up status), to its first line on
stdout (the result; all a pipe sees) and in all. The machine (CPUs, load average) is recorded
beside the figures. Modules are byte-compiled first, as after ``pip install``. With ``--json``
the figures are printed as JSON, the key ones under ``"summary"``.

Usage: python benchmarks/startup/cli_verbs.py [--runs N] [--json]
"""

import argparse
import json
import os
import platform
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import summary_row
from _shared.processes import CPU_SECONDS, cli_command, timed_run

BENCHMARK = {"name": "cli_verbs", "full": ["--runs", "5"], "quick": ["--runs", "1"], "output": "stdout"}


EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "minimal.yaml"
"""The config ``validate`` is timed on (its paths point at ``../.cache/demo``)."""


def first_output(cmd: list[str], env: dict[str, str], timeout: float = 600) -> dict[str, float]:
    """Run ``cmd`` with stderr on a pseudo-terminal and stdout on a pipe; return the seconds to
    the first byte on the terminal (``first_terminal_s``), to the first byte on stdout
    (``first_stdout_s``) and to the end (``total_s``)."""
    import pty

    master, slave = pty.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, close_fds=True
    )
    os.close(slave)
    seen: dict[str, float] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(master, selectors.EVENT_READ, "first_terminal_s")
        selector.register(proc.stdout, selectors.EVENT_READ, "first_stdout_s")
        while selector.get_map() and time.perf_counter() - start < timeout:
            for key, _ in selector.select(timeout=0.5):
                try:
                    data = os.read(key.fd, 65536)
                except OSError:  # the terminal's other end is closed
                    data = b""
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                seen.setdefault(key.data, time.perf_counter() - start)
    proc.wait(timeout=timeout)
    total = time.perf_counter() - start
    os.close(master)
    proc.stdout.close()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return {
        "first_terminal_s": round(seen.get("first_terminal_s", total), 3),
        "first_stdout_s": round(seen.get("first_stdout_s", total), 3),
        "total_s": round(total, 3),
    }


def machine() -> dict:
    """What the figures were measured on."""
    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def measure_verbs(runs: int = 3) -> dict:
    """Median wall seconds of each verb (fresh processes, alternating) on the demo data."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "COLUMNS": "120",
        "TERM": os.environ.get("TERM", "xterm-256color"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = cli_command()
    box = machine()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        cache = root / ".cache" / "demo"
        subprocess.run(
            [*cli, "demo", "--prepare-only", "--cache-dir", str(cache)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (root / "examples").mkdir()
        config = str(shutil.copy(EXAMPLE_CONFIG, root / "examples" / EXAMPLE_CONFIG.name))
        help_text = subprocess.run(
            [*cli, "validate", "--help"], env=env, check=True, capture_output=True, text=True
        ).stdout
        commands = {"energon-plugins --help": [*cli, "--help"], "energon-plugins list": [*cli, "list"]}
        if "--quick" in help_text:
            commands["energon-plugins validate --quick CONFIG"] = [*cli, "validate", "--quick", config]
        commands["energon-plugins validate CONFIG"] = [*cli, "validate", config]
        demo = [*cli, "demo", "--cache-dir", str(cache)]
        for cmd in commands.values():  # warm the file-system cache and the byte-code
            timed_run(cmd, env)
        times: dict[str, list[float]] = {label: [] for label in commands}
        demo_runs: list[dict[str, float]] = []
        for _ in range(runs):
            for label, cmd in commands.items():
                times[label].append(timed_run(cmd, env))
            demo_runs.append(first_output(demo, env))
    box["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    return {
        "runs": runs,
        "config": "examples/minimal.yaml on the demo data",
        "machine": box,
        "median_s": {label: round(statistics.median(values), 3) for label, values in times.items()},
        "cpu_median_s": {
            label: round(statistics.median(CPU_SECONDS[" ".join(cmd)][-runs:]), 3)
            for label, cmd in commands.items()
        },
        "demo_median_s": {
            key: round(statistics.median(run[key] for run in demo_runs), 3)
            for key in ("first_terminal_s", "first_stdout_s", "total_s")
        },
    }


def print_verbs(verbs: dict) -> None:
    """Print :func:`measure_verbs`'s figures."""
    box = verbs["machine"]
    print(
        f"CLI verbs, median of {verbs['runs']} runs each ({verbs['config']}; {box['cpus']} CPUs, "
        f"load average {box['load_average_1min']} at the start, {box['load_average_1min_end']} "
        f"at the end; {box['platform']}):"
    )
    for label, seconds in verbs["median_s"].items():
        print(f"    {label:<46} {seconds:8.2f} s (CPU {verbs['cpu_median_s'][label]:.2f} s)")
    demo = verbs["demo_median_s"]
    print(f"    {'energon-plugins demo: first output (terminal)':<46} {demo['first_terminal_s']:8.2f} s")
    print(f"    {'energon-plugins demo: first line on stdout':<46} {demo['first_stdout_s']:8.2f} s")
    print(f"    {'energon-plugins demo: in all':<46} {demo['total_s']:8.2f} s")


def summary_rows(verbs: dict) -> list[list]:
    """The key figures for ``run_all.py``: each verb's wall (and CPU) seconds, the demo's."""
    rows = [
        summary_row(
            f"`{label}`: wall s (CPU s), median of {verbs['runs']}",
            f"{seconds} ({verbs['cpu_median_s'][label]})",
        )
        for label, seconds in verbs["median_s"].items()
    ]
    demo = verbs["demo_median_s"]
    rows.append(
        summary_row(
            f"`energon-plugins demo`: first output on a terminal / first line on stdout / in all, "
            f"s, median of {verbs['runs']}",
            f"{demo['first_terminal_s']} / {demo['first_stdout_s']} / {demo['total_s']}",
        )
    )
    return rows


def main() -> None:
    """Print the measurement (a table, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    verbs = measure_verbs(args.runs)
    if args.json:
        print(json.dumps({"verbs": verbs, "summary": summary_rows(verbs)}, indent=2))
    else:
        print_verbs(verbs)


if __name__ == "__main__":
    main()
