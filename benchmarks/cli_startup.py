"""CLI start-up cost: ``energon-plugins list`` against ``python -c pass``.

Both are run as fresh processes in the same session, alternating, several times each; the
medians and their ratio are printed (goal: ratio <= 3). ``list`` loads every installed plugin's
registration (entry points, names, descriptions) but must not import torch, transformers,
megatron or pydantic (options models are imported when a plugin is built, validated or
shown), nor rich (its table is plain text); the script also checks that with a third probe.
Modules are byte-compiled first, as after ``pip install`` (``PYTHONDONTWRITEBYTECODE`` is
dropped for the runs).

Two environments are timed. The project's ``.venv`` holds editable installs, whose import
finders (loaded by ``site`` from ``.pth`` files) cost every interpreter about 10 ms, ``python
-c pass`` included, which flatters the ratio. A regular ``pip install`` has no such finders, so
the script also builds a throwaway virtual environment (no pip) that sees the same packages as
plain ``sys.path`` entries and times both commands there; the goal is judged on that one, the
start-up users get.

With ``--verbs`` it also times what the README promises, each verb a fresh process on the
demo data (written first into a temporary folder; ``examples/minimal.yaml`` is the config),
median of ``--verb-runs`` runs: ``--help``, ``list``, ``validate --quick CONFIG`` (the config
itself) and ``validate CONFIG`` (the components opened too), and ``demo``: the seconds to its
first output on a terminal (stderr on a pseudo-terminal: the start-up status), to its first
line on stdout (the result; all a pipe sees) and in all. The machine (CPUs, load average)
is recorded beside the figures.

Usage: python benchmarks/cli_startup.py [--runs N] [--json] [--verbs [--verb-runs N]]
"""

import argparse
import json
import os
import platform
import resource
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
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
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
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

REGULAR_BREAKDOWN = {
    "import typing (what pluggy imports first)": "import typing",
    "import pluggy (loads every plugin)": "import pluggy",
    "import click, pluggy (the floor with both)": "import click, pluggy",
    "import energon_plugins.cli": "import energon_plugins.cli",
}
"""The same in the regular install: what ``list`` cannot do without, and its imports. Plugins
register through pluggy hooks (the design's contract), so ``import pluggy`` is a floor of
``list`` whatever the command-line layer is."""


def regular_install(folder: Path) -> Path:
    """The Python of a new virtual environment that imports this one's packages without finders.

    Its one ``.pth`` file lists the source roots of the editable installs (where the project's
    and its plugins' top-level packages live) and this environment's ``site-packages`` (the
    ``*.dist-info`` folders with the entry points, click, pluggy).
    """
    import importlib.util
    import sysconfig
    import venv

    venv.create(folder, with_pip=False)
    python = folder / ("Scripts" if os.name == "nt" else "bin") / "python"
    roots = []
    for name in ("energon_plugins", *_plugin_packages()):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            root = str(Path(next(iter(spec.submodule_search_locations))).parent)
            if root not in roots:
                roots.append(root)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "packages.pth").write_text("\n".join([*roots, sysconfig.get_paths()["purelib"]]) + "\n")
    return python


def _plugin_packages() -> list[str]:
    """Top-level packages of the installed plugins (from their entry points)."""
    from energon_plugins.host._markers import ENTRY_POINT_GROUP
    from energon_plugins.host.entry_points import entry_points

    return sorted(
        {ep.value.partition(":")[0].split(".")[0].strip() for ep in entry_points(ENTRY_POINT_GROUP)}
    )


CONSOLE_SCRIPT = (
    "import sys; from energon_plugins.cli import main; sys.argv[0] = 'energon-plugins'; sys.exit(main())"
)
"""What the ``energon-plugins`` console script runs (an environment without it runs this)."""


def _alternate(
    baseline_cmd: list[str],
    cli_cmd: list[str],
    env: dict[str, str],
    runs: int,
    probes: dict[str, list[str]] | None = None,
) -> dict:
    """Median wall and CPU times of both commands over ``runs`` alternating runs."""
    _time(baseline_cmd, env)  # warm the file-system cache for both
    _time(cli_cmd, env)
    baseline, cli = [], []
    probe_times: dict[str, list[float]] = {label: [] for label in probes or {}}
    for _ in range(runs):
        baseline.append(_time(baseline_cmd, env))
        cli.append(_time(cli_cmd, env))
        for label, cmd in (probes or {}).items():
            probe_times[label].append(_time(cmd, env))
    base_median = statistics.median(baseline)
    cli_median = statistics.median(cli)
    base_cpu = statistics.median(_cpu[" ".join(baseline_cmd)][1:])
    cli_cpu = statistics.median(_cpu[" ".join(cli_cmd)][1:])
    return {
        "baseline_command": " ".join(baseline_cmd),
        "cli_command": " ".join(cli_cmd),
        "baseline_median_s": round(base_median, 4),
        "cli_median_s": round(cli_median, 4),
        "ratio": round(cli_median / base_median, 2),
        "baseline_cpu_median_s": round(base_cpu, 4),
        "cli_cpu_median_s": round(cli_cpu, 4),
        "cpu_ratio": round(cli_cpu / base_cpu, 2) if base_cpu else None,
        "breakdown_median_s": {
            label: round(statistics.median(times), 4) for label, times in probe_times.items()
        },
    }


def listed(cmd: list[str], env: dict[str, str]) -> list[str]:
    """The ``kind:name`` rows that ``cmd`` (a ``list`` command) prints with ``--json``."""
    out = subprocess.run([*cmd, "--json"], env=env, check=True, capture_output=True, text=True).stdout
    return sorted(f"{row['kind']}:{row['name']}" for row in json.loads(out))


def measure(runs: int = 7) -> dict:
    """Median wall times of both commands over ``runs`` alternating runs, and their ratio."""
    # As after ``pip install``: modules byte-compiled (the warm-up runs write the .pyc files of
    # editable installs; with PYTHONDONTWRITEBYTECODE every run would compile them again).
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    probes = {label: [sys.executable, "-c", code] for label, code in BREAKDOWN.items()}
    editable = _alternate([sys.executable, "-c", "pass"], [*_cli(), "list"], env, runs, probes)
    with tempfile.TemporaryDirectory() as folder:
        python = str(regular_install(Path(folder)))
        regular_cli = [python, "-c", CONSOLE_SCRIPT, "list"]
        regular = _alternate(
            [python, "-c", "pass"],
            regular_cli,
            env,
            runs,
            {label: [python, "-c", code] for label, code in REGULAR_BREAKDOWN.items()},
        )
        regular["same_rows_listed"] = listed(regular_cli, env) == listed([*_cli(), "list"], env)
    return {
        **editable,
        "runs": runs,
        "regular_install": regular,
        "goal_ratio": 3.0,
        "goal_met": regular["ratio"] <= 3.0,
        "heavy_modules_imported_by_list": heavy_modules_after_list(env),
    }


EXAMPLE_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "minimal.yaml"
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
    cli = _cli()
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
            _time(cmd, env)
        times: dict[str, list[float]] = {label: [] for label in commands}
        demo_runs: list[dict[str, float]] = []
        for _ in range(runs):
            for label, cmd in commands.items():
                times[label].append(_time(cmd, env))
            demo_runs.append(first_output(demo, env))
    box["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    return {
        "runs": runs,
        "config": "examples/minimal.yaml on the demo data",
        "machine": box,
        "median_s": {label: round(statistics.median(values), 3) for label, values in times.items()},
        "cpu_median_s": {
            label: round(statistics.median(_cpu[" ".join(cmd)][-runs:]), 3) for label, cmd in commands.items()
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


def main() -> None:
    """Print the measurement (a table, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--verbs", action="store_true", help="also time --help, list, validate and demo on the demo data"
    )
    parser.add_argument("--verb-runs", type=int, default=3)
    args = parser.parse_args()
    result = measure(args.runs)
    if args.verbs:
        result["verbs"] = measure_verbs(args.verb_runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"CLI start-up, median of {result['runs']} runs each:")
    for title, figures in (
        ("this environment (editable installs)", result),
        ("a regular install (no editable finders)", result["regular_install"]),
    ):
        print(f"  {title}:")
        print(f"    python -c pass       {figures['baseline_median_s'] * 1000:8.1f} ms")
        print(f"    energon-plugins list {figures['cli_median_s'] * 1000:8.1f} ms")
        print(
            f"    ratio {figures['ratio']:.2f}; CPU time (user+sys) "
            f"{figures['baseline_cpu_median_s'] * 1000:.1f} vs {figures['cli_cpu_median_s'] * 1000:.1f} ms, "
            f"ratio {figures['cpu_ratio']:.2f}"
        )
        for label, seconds in figures["breakdown_median_s"].items():
            if figures is not result:
                print(
                    f"    {label:<42} {seconds * 1000:8.1f} ms "
                    f"({seconds / figures['baseline_median_s']:.2f}x python -c pass)"
                )
    if not result["regular_install"]["same_rows_listed"]:
        print("  WARNING: the regular install listed other plugins than this environment")
    verdict = "meets" if result["goal_met"] else "misses"
    print(f"  a regular install {verdict} the goal <= {result['goal_ratio']:.0f}")
    print("  where the time goes (fresh interpreters, medians):")
    for label, seconds in result["breakdown_median_s"].items():
        print(f"    {label:<30} {seconds * 1000:8.1f} ms")
    heavy = result["heavy_modules_imported_by_list"]
    print(f"  heavy modules imported by list: {', '.join(heavy) if heavy else 'none'}")
    if "verbs" in result:
        print_verbs(result["verbs"])


if __name__ == "__main__":
    main()
