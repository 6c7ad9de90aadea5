"""Small helpers shared by the benchmark scripts: a rich table, goal lines, summary rows, a JSON dump.

A script's JSON carries its own key figures as ``"summary": [[figure, value, goal, met], ...]``
(:func:`summary_row` builds one); ``run_all.py`` concatenates them (see ``benchmarks/README.md``).
"""

import json
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print ``rows`` under ``columns`` as a rich table (plain text when rich is missing)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a core dependency
        print(title)
        print(" | ".join(columns))
        for row in rows:
            print(" | ".join(str(cell) for cell in row))
        return
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console(width=max(120, 14 * len(columns))).print(table)


def goal_line(label: str, ok: bool, detail: str) -> str:
    """One ``[met]``/``[MISSED]`` line for a goal, with its measured figures."""
    return f"[{'met' if ok else 'MISSED'}] {label}: {detail}"


def summary_row(figure: str, value: Any, goal: str = "", met: bool | None = None) -> list[Any]:
    """One ``[figure, value, goal, met]`` row of a script's ``"summary"``: ``value`` as text,
    ``goal`` ``""`` and ``met`` ``None`` when the figure has no goal."""
    return [figure, str(value), goal, None if met is None else bool(met)]


def goal_rows(goals: Sequence[Mapping[str, Any]], goal: str = "") -> list[list[Any]]:
    """Summary rows of a script's ``goals`` list (``{"goal", "met", "detail"}`` mappings): the
    goal's label as the figure, its detail as the value, ``goal`` in the goal column."""
    return [summary_row(g["goal"], g["detail"], goal, g["met"]) for g in goals]


def write_json(path: str | Path, name: str, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` with the machine and time it was measured on; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **payload,
    }
    path.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
    return path
