"""``energon-plugins convert SOURCE OUTPUT --from FORMAT``: the data people have -> an Energon dataset.

Streams the records of SOURCE through the source format's reader, checks each one, writes
webdataset shards per split, a report of the rejected records, and Energon's index; see
:func:`energon_plugins.convert.run.convert_dataset`. A progress bar is drawn on a terminal.
"""

from typing import Any

import click

EXIT_INTERRUPTED = 130


def _progress_bar(enabled: bool) -> Any:
    """A rich progress display on stderr (or None), showing records, rate and rejects."""
    if not enabled:
        return None
    from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from energon_plugins.cli._output import console

    return Progress(
        SpinnerColumn(), TextColumn("[bold]converting[/]"), MofNCompleteColumn(),
        TextColumn("records, {task.fields[rejected]} rejected, {task.fields[rate]} records/s"),
        TimeElapsedColumn(), console=console(stderr=True), transient=True,
    )


def print_summary(result: Any) -> None:
    """Print what was written per split, what was rejected and why, and what to run next."""
    from rich.table import Table

    from energon_plugins.cli._output import console
    from energon_plugins.convert.records import REASONS

    out = console()
    table = Table(title=f"{result.output}", title_justify="left")
    for column in ("split", "records", "shards"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for split, count in result.written.items():
        table.add_row(split, str(count), str(len(result.shards.get(split, []))))
    out.print(table)
    resumed = f", resumed at record {result.resumed_from}" if result.resumed_from else ""
    out.print(f"{result.records} records read, {sum(result.written.values())} written, "
              f"{result.rejected_total} rejected ({result.records_per_second:.0f} records/s, "
              f"{result.seconds:.1f} s in all{resumed})")
    for reason, count in result.rejected.items():
        out.print(f"  {reason}: {count}  [dim]{REASONS.get(reason, '')}[/]")
    if result.rejected_total:
        out.print(f"rejected records, with the reason for each: {result.report}")
    for split in result.empty_splits:
        out.print(f"[yellow]split {split!r} got no record and is left out[/] (more data or a "
                  "larger share)")
    out.print(f"\nNext: put [bold]path: {result.output}[/] in a datamodule config, then "
              "`energon-plugins preview CONFIG`.")


@click.command("convert")
@click.argument("source", type=click.Path(exists=True))
@click.argument("output", type=click.Path(file_okay=False))
@click.option("--from", "source_format", required=True, metavar="FORMAT",
              help="The source format: llava-json, sharegpt, hf-parquet or a plugin's "
                   "(`energon-plugins list --kind source-format`).")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE",
              help="An option of the source format (YAML value), e.g. -o image_folder=images; "
                   "repeatable (`energon-plugins show FORMAT` lists them).")
@click.option("--split-ratio", default="train=0.95,val=0.05", show_default=True,
              help="Shares of the splits: train=..,val=..,test=.. or 0.9,0.05,0.05.")
@click.option("--shard-size", default="256MB", show_default=True,
              help="Largest shard (bytes, or with a unit: 64MB, 1GiB).")
@click.option("--workers", type=int, default=None,
              help="Worker processes that load and check records (default: one per CPU; 0: none).")
@click.option("--image-token", default="<image>", show_default=True,
              help="The image placeholder in the text (the config's sample_config.image_token).")
@click.option("--reencode", type=click.Choice(["png", "jpeg"]), default=None,
              help="Re-encode every image (default: keep each image's original bytes).")
@click.option("--strict", is_flag=True, help="Stop at the first bad record instead of reporting it.")
@click.option("--resume", is_flag=True, help="Continue an interrupted conversion in OUTPUT.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier conversion in OUTPUT.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def convert_command(source: str, output: str, source_format: str, options: tuple[str, ...],
                    split_ratio: str, shard_size: str, workers: int | None, image_token: str,
                    reencode: str | None, strict: bool, resume: bool, overwrite: bool,
                    as_json: bool) -> None:
    """Convert SOURCE (LLaVA JSON, ShareGPT, parquet, ...) into a prepared Energon dataset in OUTPUT."""
    import time

    from energon_plugins.cli._output import print_json
    from energon_plugins.config.overrides import parse_set_option
    from energon_plugins.convert.run import convert_dataset

    parsed = dict(parse_set_option(item, flag="--option") for item in options)
    bar = _progress_bar(not as_json and click.get_text_stream("stderr").isatty())
    task = None
    started = time.perf_counter()

    def progress(done: int, rejected: int) -> None:
        rate = done / max(time.perf_counter() - started, 1e-9)
        bar.update(task, completed=done, rejected=rejected, rate=f"{rate:.0f}")

    try:
        if bar is not None:
            bar.start()
            task = bar.add_task("convert", total=None, rejected=0, rate="0")
        result = convert_dataset(
            source, output, source_format, options=parsed, split_ratio=split_ratio,
            shard_size=shard_size, image_token=image_token, reencode=reencode, workers=workers,
            strict=strict, resume=resume, overwrite=overwrite,
            progress=progress if bar is not None else None,
        )
    except KeyboardInterrupt:
        if bar is not None:
            bar.stop()
            bar = None
        click.echo(f"Interrupted. Run the same command with --resume to continue from the last "
                   f"checkpoint in {output}.", err=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        if bar is not None:
            bar.stop()
    if as_json:
        print_json(result.to_json())
    else:
        print_summary(result)
