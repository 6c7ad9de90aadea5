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

With ``--json`` the figures are printed as JSON, the key ones under ``"summary"``; the
verbs' own times: ``cli_verbs.py``.

Usage: python benchmarks/startup/cli_startup.py [--runs N] [--json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import summary_row
from _shared.processes import CPU_SECONDS, cli_command, timed_run

BENCHMARK = {"name": "cli_startup", "full": ["--runs", "9"], "quick": ["--runs", "1"], "output": "stdout"}

HEAVY = ("torch", "transformers", "megatron", "pydantic", "rich")


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
    timed_run(baseline_cmd, env)  # warm the file-system cache for both
    timed_run(cli_cmd, env)
    baseline, cli = [], []
    probe_times: dict[str, list[float]] = {label: [] for label in probes or {}}
    for _ in range(runs):
        baseline.append(timed_run(baseline_cmd, env))
        cli.append(timed_run(cli_cmd, env))
        for label, cmd in (probes or {}).items():
            probe_times[label].append(timed_run(cmd, env))
    base_median = statistics.median(baseline)
    cli_median = statistics.median(cli)
    base_cpu = statistics.median(CPU_SECONDS[" ".join(baseline_cmd)][1:])
    cli_cpu = statistics.median(CPU_SECONDS[" ".join(cli_cmd)][1:])
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
    editable = _alternate([sys.executable, "-c", "pass"], [*cli_command(), "list"], env, runs, probes)
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
        regular["same_rows_listed"] = listed(regular_cli, env) == listed([*cli_command(), "list"], env)
    return {
        **editable,
        "runs": runs,
        "regular_install": regular,
        "goal_ratio": 3.0,
        "goal_met": regular["ratio"] <= 3.0,
        "heavy_modules_imported_by_list": heavy_modules_after_list(env),
    }


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: ``list`` against ``python -c pass``, heavy imports."""
    regular = result["regular_install"]
    rows = [
        summary_row(
            "`energon-plugins list` / `python -c pass`, regular install (wall; CPU time)",
            f"{regular['cli_median_s'] * 1000:.0f} / {regular['baseline_median_s'] * 1000:.0f} ms "
            f"({regular['ratio']}x; CPU {regular.get('cpu_ratio')}x)",
            f"<= {result['goal_ratio']}",
            regular["ratio"] <= result["goal_ratio"],
        )
    ]
    floor = regular["breakdown_median_s"].get("import pluggy (loads every plugin)")
    if floor:
        rows.append(
            summary_row(
                "`import pluggy` alone / `python -c pass`, regular install",
                f"{floor / regular['baseline_median_s']:.2f}x (a floor of `list`)",
            )
        )
    rows.append(
        summary_row(
            "the same in the project's .venv (editable installs)",
            f"{result['cli_median_s'] * 1000:.0f} / {result['baseline_median_s'] * 1000:.0f} ms "
            f"({result['ratio']}x)",
        )
    )
    heavy = result["heavy_modules_imported_by_list"]
    rows.append(
        summary_row("heavy modules imported by `list`", ", ".join(heavy) or "none", "none", not heavy)
    )
    return rows


def main() -> None:
    """Print the measurement (a table, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs)
    result["summary"] = summary_rows(result)
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


if __name__ == "__main__":
    main()
