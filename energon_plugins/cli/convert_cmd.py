"""``energon-plugins convert SOURCE OUTPUT --from FORMAT``: the data people have -> an Energon dataset.

Streams the records of SOURCE through the source format's reader, checks each one, writes
webdataset shards per split, a report of the rejected records, and Energon's index; see
:func:`energon_plugins.convert.run.convert_dataset`. A progress bar is drawn on a terminal.
"""

import sys
from typing import Any

import click


def _progress_bar(enabled: bool) -> Any:
    """What the run shows on stderr: notices always, a rich progress display (records of the
    total, rate, rejects, time left, the indexing step) when ``enabled``."""
    from energon_plugins.cli.convert_progress import ConvertDisplay

    return ConvertDisplay(animated=enabled)


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
    out.print(
        f"{result.records} records read, {sum(result.written.values())} written, "
        f"{result.rejected_total} rejected ({result.records_per_second:.0f} records/s, "
        f"{result.seconds:.1f} s in all{resumed})"
    )
    for reason, count in result.rejected.items():
        out.print(f"  {reason}: {count}  [dim]{REASONS.get(reason, '')}[/]")
    if result.rejected_total:
        out.print(f"rejected records, with the reason for each: {result.report}")
    for split in result.empty_splits:
        out.print(f"[yellow]split {split!r} got no record and is left out[/] (more data or a larger share)")
    for warning in result.warnings:
        out.print("[bold yellow]warning:[/] ", end="")
        out.print(warning, markup=False)
    out.print(
        f"\nNext: put [bold]path: {result.output}[/] in a datamodule config, then "
        "`energon-plugins preview CONFIG`."
    )


@click.command("convert")
@click.argument("source", type=click.Path(exists=True))
@click.argument("output", type=click.Path(file_okay=False))
@click.option(
    "--from",
    "source_format",
    required=True,
    metavar="FORMAT",
    help="The source format: llava-json, sharegpt, hf-parquet or a plugin's "
    "(`energon-plugins list --kind source-format`).",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An option of the source format (YAML value), e.g. -o image_folder=images; "
    "repeatable (`energon-plugins show FORMAT` lists them).",
)
@click.option(
    "--split-ratio",
    default="train=0.95,val=0.05",
    show_default=True,
    help="Shares of the splits: train=..,val=..,test=.. or 0.9,0.05,0.05.",
)
@click.option(
    "--shard-size",
    default="256MB",
    show_default=True,
    help="Largest shard (bytes, or with a unit: 64MB, 1GiB).",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Worker processes that load and check records (default: one per CPU; 0: none).",
)
@click.option(
    "--image-token",
    default="<image>",
    show_default=True,
    help="The image placeholder in the text (the config's sample_config.image_token).",
)
@click.option(
    "--reencode",
    type=click.Choice(["png", "jpeg"]),
    default=None,
    help="Re-encode every image (default: keep each image's original bytes).",
)
@click.option(
    "--max-image-size",
    default="64MiB",
    show_default=True,
    metavar="SIZE",
    help="Largest image file or embedded image; a larger one is rejected (too_large) without being read.",
)
@click.option(
    "--max-image-pixels",
    default=str(8192 * 8192),
    show_default=True,
    metavar="N",
    help="Most pixels an image header may declare (64M accepted); more is rejected "
    "(too_many_pixels) before decoding.",
)
@click.option(
    "--allow-outside",
    "allow_outside",
    multiple=True,
    metavar="DIR",
    type=click.Path(exists=True, file_okay=False),
    help="Also read images from inside DIR (for absolute paths in the records); "
    "repeatable. Without it an image must lie inside the media folder (symlinks "
    "resolved); URLs, devices, FIFOs and other non-files are always rejected.",
)
@click.option("--strict", is_flag=True, help="Stop at the first bad record instead of reporting it.")
@click.option(
    "--max-rejected",
    default="10%",
    show_default=True,
    metavar="SHARE|N",
    help="Fail (before the index is written; --resume continues) when more records "
    "are rejected: a share of those read (5%; 100% for no limit) or a number.",
)
@click.option("--resume", is_flag=True, help="Continue an interrupted conversion in OUTPUT.")
@click.option("--overwrite", is_flag=True, help="Replace an earlier conversion in OUTPUT.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def convert_command(
    source: str,
    output: str,
    source_format: str,
    options: tuple[str, ...],
    split_ratio: str,
    shard_size: str,
    workers: int | None,
    image_token: str,
    reencode: str | None,
    max_image_size: str,
    max_image_pixels: str,
    allow_outside: tuple[str, ...],
    strict: bool,
    max_rejected: str,
    resume: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Convert SOURCE (LLaVA JSON, ShareGPT, parquet, ...) into a prepared Energon dataset in OUTPUT.

    Images are read only from inside the media folder (-o image_folder=DIR; symlinks resolved)
    or an --allow-outside DIR, and only regular files under --max-image-size. JSON records
    larger than -o max_record_bytes=16MiB or nested deeper than -o max_depth=64 are not
    read. Each refusal is a rejected record in OUTPUT's report with its reason: url,
    outside_folder, not_a_file, too_large, too_many_pixels, record_too_large, too_deep.
    """
    from energon_plugins.cli._output import print_json, stream_is_terminal
    from energon_plugins.config.overrides import parse_set_option
    from energon_plugins.convert.interrupt import Interrupted, catch_stop_signals, exit_status
    from energon_plugins.convert.run import convert_dataset

    parsed = dict(parse_set_option(item, flag="-o/--option") for item in options)
    # sys.stderr rather than click.get_text_stream, deprecated since Click 8.5
    bar = _progress_bar(not as_json and stream_is_terminal(sys.stderr))

    # SIGINT and SIGTERM (a scheduler's pre-emption) stop the run resumably: exit 130 / 143;
    # a second one exits at once (energon_plugins.convert.interrupt)
    stop = catch_stop_signals(
        f"Interrupted. Run the same command with --resume to continue from the last checkpoint in {output}."
    )
    try:
        if bar is not None:
            bar.start()
        result = convert_dataset(
            source,
            output,
            source_format,
            options=parsed,
            split_ratio=split_ratio,
            shard_size=shard_size,
            image_token=image_token,
            reencode=reencode,
            workers=workers,
            max_image_size=max_image_size,
            max_image_pixels=max_image_pixels,
            allow_outside=list(allow_outside),
            strict=strict,
            max_rejected=max_rejected,
            resume=resume,
            overwrite=overwrite,
            progress=bar,
        )
        if stop.signum is not None:  # its raise was dropped where it landed: stop now
            raise Interrupted(stop.signum)
    except KeyboardInterrupt as exc:
        if bar is not None:
            bar.stop()
            bar = None
        stop.print_farewell()
        raise SystemExit(exit_status(exc)) from None
    finally:
        stop.restore()
        if bar is not None:
            bar.stop()
    if as_json:
        print_json(result.to_json())
    else:
        print_summary(result)
