"""``energon-plugins list [--json] [--kind K]``: the installed plugins and the failed ones.

The table is plain text (:mod:`energon_plugins.cli._columns`), not rich: ``list`` is the verb
people run to see what is installed, and its start-up time is a goal (issue 16).
"""

import click

from energon_plugins.cli._output import one_line, output_width, print_json
from energon_plugins.host.kinds import KINDS

KIND_CHOICES = [*KINDS, *(kind.replace("_", "-") for kind in KINDS)]


SLOW_LOAD_SECONDS = 0.5
"""A distribution whose plugin modules take this long to import and register gets a hint."""


def _load_time(seconds: float) -> str:
    """``"12 ms"``, or ``"1.3 s"`` from a second on."""
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


def _terminal_columns() -> int:
    """``$COLUMNS``, else the terminal's width (80 when it cannot be read); as
    ``shutil.get_terminal_size``, which would import the archive modules."""
    import os

    try:
        return int(os.environ.get("COLUMNS") or 0) or os.get_terminal_size().columns
    except (OSError, ValueError):
        return 80


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option(
    "--kind",
    "kind",
    type=click.Choice(KIND_CHOICES, case_sensitive=False),
    default=None,
    help="Only plugins of this kind.",
)
def list_command(as_json: bool, kind: str | None) -> None:
    """List installed plugins: name, kind, distribution, version, description, status.

    Plugins that failed to load are listed with their error in one line; the others still work.
    """
    from energon_plugins.host.api import available
    from energon_plugins.host.kinds import normalize_kind

    rows = available(normalize_kind(kind) if kind else None)
    if as_json:
        print_json([row.as_dict() for row in rows])
        return

    from energon_plugins.cli._columns import render_columns

    headers = ("name", "kind", "distribution", "version", "description", "load", "status")
    cells = []
    for row in rows:
        description = row.description
        if row.aliases:
            description += f" (aliases: {', '.join(row.aliases)})"
        if row.status == "failed":
            description = one_line(row.error)
        elif row.status == "conflict":
            description = f"{description} — {one_line(row.error)}"
        cells.append(
            (
                row.name,
                row.kind or "?",
                row.distribution,
                row.version,
                description,
                _load_time(row.load_seconds),
                row.status,
            )
        )
    colour = {"failed": "red", "conflict": "yellow"}

    def style(index: int, column: int, text: str) -> str:
        fg = colour.get(rows[index].status) if column == len(headers) - 1 else None
        return click.style(text, fg=fg) if fg else text

    width = output_width() or _terminal_columns()
    click.echo(
        render_columns(
            headers,
            cells,
            width=width,
            title="energon-plugins",
            # The floors leave room for a load time up to "999 ms" in 80 columns: a loaded
            # machine lists a plugin as "12 ms" where an idle one says "2 ms".
            folding={"description": 10, "distribution": 8, "kind": 8, "version": 7},
            right=frozenset({"load"}),
            style=style,
        )
    )
    slow = sorted(
        {(r.distribution, r.load_seconds) for r in rows if r.load_seconds >= SLOW_LOAD_SECONDS},
        key=lambda d: -d[1],
    )
    for distribution, seconds in slow:
        click.echo(
            click.style(f"{distribution} takes {seconds:.1f} s to load", fg="yellow")
            + ": every energon-plugins call pays it; its plugin module should import "
            "heavy packages (torch, transformers) inside factories, not at module level."
        )
    failed = sum(row.status == "failed" for row in rows)
    if failed:
        click.echo(
            click.style(f"{failed} plugin module(s) failed to load", fg="red") + "; the other plugins work."
        )
