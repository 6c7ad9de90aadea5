"""``energon-plugins blend plan CONFIG``: blend weights that give requested shares of tokens.

CONFIG is a datamodule config whose ``path`` is a metadataset with a weighted ``blend`` in its
training split. ``plan`` reads training batches through the config's own task encoder until
every top-level entry has ``--samples`` samples, takes each entry's mean tokens per sample
from the loader's per-source counters, and writes the metadataset again (``-o``) with the
sample weights that give the requested token shares: ``--share PATH=SHARE`` for every entry,
or, without ``--share``, the blend's current weights read as token shares. ``--tokens`` says
which tokens count (all real tokens, loss tokens, text, image or video tokens). The table
shows, per entry, the measured mean, the requested share, the current and planned sample
weights; ``--json`` prints the same as JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from energon_plugins.cli._config_options import datamodule_for, set_option
from energon_plugins.loading.token_means import TOKEN_KINDS


@click.group("blend")
def blend_command() -> None:
    """Plan the weights of a metadataset blend."""


def _share(item: str) -> tuple[str, float]:
    path, sep, value = item.rpartition("=")
    try:
        if not sep or not path:
            raise ValueError
        return path, float(value)
    except ValueError:
        raise click.BadParameter(
            f"{item!r}: expected PATH=SHARE, e.g. ocr=0.4", param_hint="--share"
        ) from None


@blend_command.command("plan")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write the planned metadataset (default: beside it, NAME.plan.yaml).",
)
@click.option(
    "--share",
    "shares",
    multiple=True,
    metavar="PATH=SHARE",
    help="Requested token share of a top-level blend entry, named by its path as the YAML "
    "writes it; give every entry (shares are normalised). Default: the current weights.",
)
@click.option(
    "--tokens",
    type=click.Choice(TOKEN_KINDS),
    default="tokens",
    show_default=True,
    help="Which tokens the shares count.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Samples to measure of each entry.",
)
@click.option(
    "--max-samples",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Stop measuring after this many samples in all (rare entries then count fewer).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON only.")
@set_option()
def plan_command(
    config: str,
    output: str | None,
    shares: tuple[str, ...],
    tokens: str,
    samples: int,
    max_samples: int,
    as_json: bool,
    sets: tuple[str, ...],
) -> None:
    """Write CONFIG's blend with sample weights that give the requested token shares."""
    from energon_plugins.cli._output import print_json, startup_status
    from energon_plugins.config.blend_plan import (
        blend_entries,
        planned_weights,
        requested_shares,
        write_planned,
    )
    from energon_plugins.errors import ConfigError

    wanted = dict(_share(item) for item in shares)
    with startup_status(f"checking {config}...") as status:
        datamodule, _ = datamodule_for(config, sets, status, check_fields=False)
        source = str(datamodule.path)
        if not source.endswith((".yaml", ".yml")):
            raise ConfigError(f"path: {source} is one dataset, not a metadataset blend; nothing to plan")
        entries = blend_entries(source)
        requested = requested_shares(entries, wanted)
        target = Path(output) if output else _default_output(source)
    measured = _measure(datamodule, {e.path: e.sources for e in entries}, samples, max_samples, as_json)
    means = {path: measured[path].mean(tokens) for path in requested}
    weights = planned_weights(requested, means)
    current_total = sum(e.weight for e in entries)
    rows = [
        {
            "entry": e.path,
            "samples_measured": measured[e.path].samples,
            f"mean_{tokens}": round(means[e.path], 2),
            "token_share": round(requested[e.path], 6),
            "current_weight": round(e.weight / current_total, 6),
            "planned_weight": weights[e.path],
        }
        for e in entries
    ]
    header = (
        f"Planned by `energon-plugins blend plan` from {source}: sample weights for these shares of "
        f"{tokens} ({', '.join(f'{p} {requested[p]:.3g}' for p in requested)}), measured over "
        f"{sum(r['samples_measured'] for r in rows)} samples."
    )
    written = write_planned(source, target, weights, header=header)
    if as_json:
        print_json({"output": str(written), "tokens": tokens, "entries": rows})
        return
    _print_table(config, tokens, rows, written)


def _default_output(source: str) -> Path:
    if "://" in source:
        raise click.UsageError(f"{source} is remote: name a local file to write the plan to with -o")
    path = Path(source)
    return path.with_name(f"{path.stem}.plan.yaml")


def _measure(
    datamodule: Any, entries: dict[str, tuple[str, ...]], per_entry: int, most: int, quiet: bool
) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from energon_plugins.cli._output import console
    from energon_plugins.loading.token_means import measure_entries

    goal = min(most, per_entry * len(entries))
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
        disable=quiet,
    ) as bar:
        task = bar.add_task("measuring samples", total=goal)
        return measure_entries(
            datamodule,
            entries,
            per_entry=per_entry,
            max_samples=most,
            progress=lambda read: bar.update(task, completed=min(read, goal)),
        )


def _print_table(config: str, tokens: str, rows: list[dict[str, Any]], written: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from energon_plugins.cli._output import console

    table = Table(title=f"blend plan {config} (shares of {tokens})", title_justify="left")
    for column in ("entry", "samples", "mean/sample", "share", "weight now", "planned"):
        table.add_column(column, justify="left" if column == "entry" else "right")
    for row in rows:
        table.add_row(
            escape(row["entry"]),
            str(row["samples_measured"]),
            f"{row[f'mean_{tokens}']:.1f}",
            f"{row['token_share']:.1%}",
            f"{row['current_weight']:.3f}",
            f"{row['planned_weight']:.4f}",
        )
    out = console()
    out.print(table)
    out.print(f"wrote {escape(str(written))}", soft_wrap=True)
