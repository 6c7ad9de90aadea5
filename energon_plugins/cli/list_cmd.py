"""``energon-plugins list [--json] [--kind K]``: the installed plugins and the failed ones."""

import click

from energon_plugins.cli._output import console, one_line, print_json
from energon_plugins.host.kinds import KINDS

KIND_CHOICES = [*KINDS, *(kind.replace("_", "-") for kind in KINDS)]


SLOW_LOAD_SECONDS = 0.5
"""A distribution whose plugin modules take this long to import and register gets a hint."""


def _load_time(seconds: float) -> str:
    """``"12 ms"``, or ``"1.3 s"`` from a second on."""
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option(
    "--kind", "kind", type=click.Choice(KIND_CHOICES, case_sensitive=False), default=None,
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

    from rich.table import Table

    table = Table(title="energon-plugins", title_justify="left")
    # Names are what users copy into configs: never folded, however narrow the terminal.
    table.add_column("name", no_wrap=True, min_width=max((len(r.name) for r in rows), default=4))
    for column in ("kind", "distribution", "version"):
        table.add_column(column, overflow="fold")
    table.add_column("description", overflow="fold")
    table.add_column("load", no_wrap=True, justify="right")
    table.add_column("status", no_wrap=True, min_width=6)
    for row in rows:
        status = row.status
        description = row.description
        if row.aliases:
            description += f" (aliases: {', '.join(row.aliases)})"
        if row.status == "failed":
            status = "[red]failed[/red]"
            description = one_line(row.error)
        elif row.status == "conflict":
            status = "[yellow]conflict[/yellow]"
            description = f"{description} — {one_line(row.error)}"
        table.add_row(row.name, row.kind or "?", row.distribution, row.version,
                      description, _load_time(row.load_seconds), status)
    out = console()
    out.print(table)
    slow = sorted({(r.distribution, r.load_seconds) for r in rows
                   if r.load_seconds >= SLOW_LOAD_SECONDS}, key=lambda d: -d[1])
    for distribution, seconds in slow:
        out.print(f"[yellow]{distribution} takes {seconds:.1f} s to load[/yellow]: every "
                  "energon-plugins call pays it; its plugin module should import heavy "
                  "packages (torch, transformers) inside factories, not at module level.")
    failed = sum(row.status == "failed" for row in rows)
    if failed:
        out.print(f"[red]{failed} plugin module(s) failed to load[/red]; the other plugins work.")
