"""``energon-plugins checkpoint info DIR`` and ``checkpoint redistribute SRC DST --dp N``.

``info`` shows what a checkpoint's loader-state files hold (the layout that saved them, the
data partitions, the batches consumed per partition, skips) and whether they make one complete
set; ``redistribute`` rewrites them for another number of data-parallel ranks or workers, offline
(see :mod:`energon_plugins.loading.redistribute`). DIR / SRC: a folder of ``save_checkpoint``'s
files, a Megatron-Bridge checkpoint root or one of its ``iter_NNNNNNN`` folders. DIR, SRC and DST
may be local folders or object-store URLs (``msc://PROFILE/bucket/...``, configured by
``MSC_CONFIG``).
"""

from typing import Any

import click

from energon_plugins.cli._output import console, print_json, startup_status


class StateFolder(click.ParamType):
    """A local folder (checked as ``click.Path(file_okay=False)`` checks it) or an object-store
    URL, kept as given (``exists``: one that names no folder is refused, as a local one is)."""

    name = "directory"

    def __init__(self, *, exists: bool) -> None:
        self.exists = exists
        self.local = click.Path(exists=exists, file_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """``value`` as a local path string, or the URL itself."""
        from energon_plugins.loading.state_store import StateStoreError, is_dir, is_url, location, profile_of

        text = str(value)
        if not is_url(text):
            return self.local.convert(value, param, ctx)
        if self.exists:
            try:
                found = is_dir(location(text))
            except StateStoreError as exc:
                self.fail(str(exc), param, ctx)
            if not found:
                self.fail(
                    f"Directory {text!r} does not exist (storage profile {profile_of(text)!r}).", param, ctx
                )
        return text


@click.group("checkpoint")
def checkpoint_command() -> None:
    """Inspect a checkpoint's loader states, or rewrite them for another number of GPUs or workers."""


@checkpoint_command.command("info")
@click.argument("folder", metavar="DIR", type=StateFolder(exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def info_command(ctx: click.Context, folder: str, as_json: bool) -> None:
    """Show what DIR's loader-state files hold and whether they make one complete set (DIR: a
    local folder or an msc://PROFILE/... URL).

    Ranks and workers that saved them, data partitions P and virtual workers V, seed, dataset,
    state format; per rank its workers, partitions, batches consumed per partition and samples
    skipped by reason. Exits with 1 when the set is incomplete or inconsistent (the reason is
    printed).
    """
    with startup_status(f"reading the loader states in {folder}..."):
        from energon_plugins.loading.checkpoint_info import describe_checkpoint

        summary = describe_checkpoint(folder)
    if as_json:
        print_json(summary)
    else:
        print_summary(summary)
    if not summary["complete"]:
        from energon_plugins.cli.main import EXIT_USER_ERROR

        click.echo(f"Error: {summary['problem']}", err=True)
        ctx.exit(EXIT_USER_ERROR)


def _consumed(row: dict[str, Any]) -> str:
    consumed = row.get("consumed")
    if not consumed:
        return "-"
    return ", ".join(f"p{p}: {n}" for p, n in consumed.items())


def _skipped(row: dict[str, Any]) -> str:
    skipped = row.get("skipped") or {}
    return ", ".join(f"{reason}: {n}" for reason, n in sorted(skipped.items())) or "0"


def _format(version: Any) -> str:
    if version is None:
        return "Megatron-Bridge's (no format number)"
    return str(version)


def print_summary(summary: dict[str, Any]) -> None:
    """Print :func:`~energon_plugins.loading.checkpoint_info.describe_checkpoint`'s summary."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    where = escape(summary["folder"])
    if summary["origin"] == "megatron-bridge":
        where += f" (Megatron-Bridge, iteration {summary['iteration']})"
    out.print(f"[bold]{where}[/]")
    if summary["dp_size"] is not None:
        kind = "data partitions" if summary["partitioned"] else "one per worker, no data_partitions set"
        fields = [
            ("saved by", f"{summary['dp_size']} DP ranks x {summary['workers']} workers"),
            ("partitions", f"P = {summary['partitions']}, V = {summary['virtual_workers']} ({kind})"),
            ("seed", str(summary["seed"])),
            ("dataset", str(summary["dataset"])),
            ("state format", _format(summary["format"])),
        ]
        for label, value in fields:
            out.print(f"  {label:<13} {escape(value)}")
    table = Table(title_justify="left")
    for column in ("rank", "file", "workers", "partitions", "batches consumed", "skipped"):
        table.add_column(column, justify="right" if column in ("rank", "workers") else "left")
    for row in summary["rank_files"]:
        if "error" in row:
            table.add_row(
                str(row["rank"]), escape(row["file"]), "", "", f"[red]{escape(row['error'])}[/]", ""
            )
            continue
        table.add_row(
            str(row["rank"]),
            escape(row["file"]),
            str(row["workers"]),
            ", ".join(map(str, row["partitions"])),
            _consumed(row),
            escape(_skipped(row)),
        )
    out.print(table)
    if summary["complete"]:
        most = summary["partitions"]
        out.print(
            f"[green]complete and consistent[/]: {summary['ranks']} rank files; a run of up to {most} "
            f"workers in all (ranks x max(workers, 1)) can continue them"
        )
    else:
        out.print(f"[red]not usable[/]: {escape(str(summary['problem']))}")


@checkpoint_command.command("redistribute")
@click.argument("src", type=StateFolder(exists=True))
@click.argument("dst", type=StateFolder(exists=False))
@click.option(
    "--dp", "dp_size", type=click.IntRange(min=1), required=True, help="Data-parallel ranks of the new run."
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Loader workers per rank of the new run (default: the old run's num_workers).",
)
def redistribute_command(src: str, dst: str, dp_size: int, workers: int | None) -> None:
    """Rewrite SRC's loader states for DP ranks x workers into the new or empty folder DST.

    Every data partition's exact state is computed from all of SRC's rank files and each new
    rank gets a file of its own, named as before (train_dataloader_dprank{NNN}.pt), which a run
    of the new size restores as its own state (load_checkpoint, or Megatron-Bridge's restore
    with dataset.dataloader_load=DST). Files from an iter_NNNNNNN folder land in
    DST/iter_NNNNNNN. SRC is left as it is; DST is written whole or not at all. SRC and DST may
    each be a local folder or an msc://PROFILE/... URL (on an object store, DST's files are
    uploaded one by one, each whole; a failed upload removes those already stored).
    """
    with startup_status(f"reading the loader states in {src}..."):
        from energon_plugins.loading.redistribute import TooManyWorkersError, redistribute

        try:
            result = redistribute(src, dst, dp_size, workers)
        except TooManyWorkersError as exc:
            chosen = "the old run's" if workers is None else str(workers)
            raise TooManyWorkersError(f"--dp {dp_size} with --workers {chosen}: {exc}") from exc
    out = console()
    folder = result.paths[0].parent
    out.print(
        f"wrote {len(result.paths)} rank files to {folder}: {result.old.describe()} -> "
        f"{result.new.dp_size} ranks x {result.new.num_workers} workers",
        markup=False,
    )
    out.print(
        f"Next: run on {result.new.dp_size} ranks with num_workers: {result.new.num_workers} and "
        f"load_checkpoint({dst!r}) (Megatron-Bridge: dataset.dataloader_load={dst}).",
        markup=False,
    )
