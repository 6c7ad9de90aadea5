"""``energon-plugins convert SOURCE OUTPUT --from FORMAT``: the data people have -> an Energon dataset.

Streams the records of SOURCE through the source format's reader, checks each one, writes
webdataset shards per split, a report of the rejected records, and Energon's index; see
:func:`energon_plugins.convert.run.convert_dataset`. A progress bar is drawn on a terminal.

``--part K/N`` (or a Slurm job array's task) converts one of N parts;
``energon-plugins convert merge PART... OUTPUT`` joins them (:class:`ConvertCommand` hands
the arguments to ``merge`` when the first one is the word ``merge``).
"""

import os
import sys
from typing import Any

import click

SUBCOMMAND_HELP = "Join the part folders of `convert --part K/N` into one prepared dataset."
STAGING_HELP = (
    "Local folder where a remote (msc://) SOURCE is copied to and a remote OUTPUT is built before "
    "its upload (default: one per OUTPUT in the system's temporary folder; --resume needs the "
    "same one)."
)
MERGE_STAGING_HELP = (
    "Local folder where a remote (msc://) OUTPUT is merged before its upload (default: one per "
    "OUTPUT in the system's temporary folder)."
)


class PathOrURL(click.Path):
    """A local path, checked as :class:`click.Path` checks it, or an ``msc://PROFILE/...`` URL
    of object storage, passed on as it is (the conversion checks it)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """``value`` itself for an ``msc://`` URL, else :class:`click.Path`'s conversion."""
        if isinstance(value, str) and value.startswith("msc://"):
            return value
        return super().convert(value, param, ctx)


class ConvertCommand(click.Command):
    """``convert SOURCE OUTPUT ...``, and its subcommands (``convert merge PART... OUTPUT``):
    when the first argument names a subcommand, its context is made instead (a SOURCE named
    like one is given as ``./merge``). ``--help`` lists the subcommands."""

    def __init__(self, *args: Any, subcommands: dict[str, click.Command], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommands = subcommands

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        """The subcommand's context when ``args`` starts with its name, else this command's."""
        if args and args[0] in self.subcommands:
            # the usage line reads "convert merge ...", without this command's SOURCE OUTPUT
            own = click.Context(click.Command(info_name), info_name=info_name, parent=parent)
            name = args[0]
            return self.subcommands[name].make_context(name, list(args[1:]), parent=own, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The options, then the subcommands."""
        super().format_options(ctx, formatter)
        with formatter.section("Commands"):
            formatter.write_dl(
                [(name, command.get_short_help_str(80)) for name, command in self.subcommands.items()]
            )


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
    how = (
        f"merged from {result.merged_parts} parts in {result.seconds:.1f} s"
        if result.merged_parts
        else f"{result.records_per_second:.0f} records/s, {result.seconds:.1f} s in all{resumed}"
    )
    read = f"records of part {result.part} read" if result.part else "records read"
    out.print(
        f"{result.records} {read}, {sum(result.written.values())} written, "
        f"{result.rejected_total} rejected ({how})"
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
    if result.part:
        out.print(
            f"\nThis folder is part {result.part}: when every part is done, join them with "
            "[bold]energon-plugins convert merge PART... OUTPUT[/]."
        )
        return
    out.print(
        f"\nNext: put [bold]path: {result.output}[/] in a datamodule config, then "
        "`energon-plugins preview CONFIG`."
    )


def _part_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``--part``: a :class:`~energon_plugins.convert.parts.Part`, ``"none"`` or None."""
    if value is None or value.strip().lower() == "none":
        return value and "none"
    from energon_plugins.convert.parts import parse_part
    from energon_plugins.errors import ConvertError

    try:
        return parse_part(value)
    except ConvertError:
        raise click.BadParameter(
            f"{value!r} is not a part: give K/N with 1 <= K <= N (e.g. 2/8), or none"
        ) from None


def _chosen_part(part: Any) -> Any:
    """The part to convert: ``--part``'s, else a Slurm job array task's (said on stderr),
    else None (the whole source)."""
    if part is not None:
        return None if part == "none" else part
    from energon_plugins.convert.parts import part_from_slurm

    found = part_from_slurm(os.environ)
    if found is None:
        return None
    chosen, line = found
    click.echo(line, err=True)
    return chosen


def _merge_interrupted(output: str) -> str:
    return f"Interrupted. Run the same command with --overwrite to merge again into {output}."


@click.command("merge", short_help=SUBCOMMAND_HELP)
@click.argument(
    "parts", nargs=-1, required=True, metavar="PART...", type=PathOrURL(exists=True, file_okay=False)
)
@click.argument("output", type=PathOrURL(file_okay=False))
@click.option("--overwrite", is_flag=True, help="Replace an earlier conversion in OUTPUT.")
@click.option(
    "--max-rejected",
    default="10%",
    show_default=True,
    metavar="SHARE|N",
    help="Fail (before anything is written) when more records of the whole source were "
    "rejected: a share (5%; 100% for no limit) or a number.",
)
@click.option(
    "--workers", type=int, default=None, help="Processes of Energon's indexing (default: one per CPU)."
)
@click.option("--staging", default=None, metavar="DIR", help=MERGE_STAGING_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def merge_command(
    parts: tuple[str, ...],
    output: str,
    overwrite: bool,
    max_rejected: str,
    workers: int | None,
    staging: str | None,
    as_json: bool,
) -> None:
    """Join the part folders PART... of `convert --part K/N` (each of the N once, any order)
    into one prepared dataset in OUTPUT: the same shards, split and report, byte for byte, as
    one `convert` of the whole source. Parts and OUTPUT may be on object storage
    (msc://PROFILE/...): remote parts are read in place, a remote OUTPUT is merged in --staging
    and uploaded, its index last.
    """
    from energon_plugins.cli._output import print_json, stream_is_terminal
    from energon_plugins.convert.interrupt import Interrupted, catch_stop_signals, exit_status
    from energon_plugins.convert.merge import merge_parts

    bar = _progress_bar(not as_json and stream_is_terminal(sys.stderr))
    stop = catch_stop_signals(_merge_interrupted(output))
    try:
        bar.start()
        result = merge_parts(
            parts,
            output,
            overwrite=overwrite,
            max_rejected=max_rejected,
            workers=workers,
            staging=staging,
            progress=bar,
        )
        if stop.signum is not None:
            raise Interrupted(stop.signum)
    except KeyboardInterrupt as exc:
        bar.stop()
        stop.print_farewell()
        raise SystemExit(exit_status(exc)) from None
    finally:
        stop.restore()
        bar.stop()
    if as_json:
        print_json(result.to_json())
    else:
        print_summary(result)


@click.command("convert", cls=ConvertCommand, subcommands={"merge": merge_command})
@click.argument("source", type=PathOrURL(exists=True))
@click.argument("output", type=PathOrURL(file_okay=False))
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
    "--audio-token",
    default="<audio>",
    show_default=True,
    help="The audio placeholder in the text (the hf-processor encoder's audio.tag).",
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
@click.option(
    "--part",
    default=None,
    metavar="K/N",
    callback=_part_option,
    help="Convert only part K of N (the records i with i % N == K-1) into OUTPUT, a part "
    "folder; `energon-plugins convert merge` joins the N parts into the dataset one run would "
    "write. In a Slurm job array the part defaults to the task's (SLURM_ARRAY_TASK_ID, _MIN, "
    "_STEP, _COUNT); `none` converts the whole source.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue an interrupted conversion (or part) in OUTPUT, or its interrupted upload.",
)
@click.option("--overwrite", is_flag=True, help="Replace an earlier conversion in OUTPUT.")
@click.option("--staging", default=None, metavar="DIR", help=STAGING_HELP)
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
    audio_token: str,
    reencode: str | None,
    max_image_size: str,
    max_image_pixels: str,
    allow_outside: tuple[str, ...],
    strict: bool,
    max_rejected: str,
    part: Any,
    resume: bool,
    overwrite: bool,
    staging: str | None,
    as_json: bool,
) -> None:
    """Convert SOURCE (LLaVA JSON, ShareGPT, parquet, ...) into a prepared Energon dataset in OUTPUT.

    SOURCE, the media folder and OUTPUT may be on object storage (msc://PROFILE/..., configured
    by MSC_CONFIG): a remote SOURCE is copied to --staging, a remote OUTPUT is built there and
    uploaded, its index last; remote images are checked from their metadata before any is read.

    Images are read only from inside the media folder (-o image_folder=DIR; symlinks resolved)
    or an --allow-outside DIR, and only regular files under --max-image-size. JSON records
    larger than -o max_record_bytes=16MiB or nested deeper than -o max_depth=64 are not
    read. Each refusal is a rejected record in OUTPUT's report with its reason: url,
    outside_folder, not_a_file, too_large, too_many_pixels, record_too_large, too_deep.
    Audio clips (an audios/audio field or column; wav, flac, mp3, m4a, ogg) follow the same
    rules, one --audio-token placeholder each.

    With --part K/N it converts one of N parts (on N machines at once, e.g. a Slurm job array);
    `energon-plugins convert merge PART... OUTPUT` joins them.
    """
    from energon_plugins.cli._output import print_json, stream_is_terminal
    from energon_plugins.config.overrides import parse_set_option
    from energon_plugins.convert.interrupt import Interrupted, catch_stop_signals, exit_status
    from energon_plugins.convert.run import convert_dataset

    parsed = dict(parse_set_option(item, flag="-o/--option") for item in options)
    chosen = _chosen_part(part)
    # sys.stderr rather than click.get_text_stream, deprecated since Click 8.5
    bar = _progress_bar(not as_json and stream_is_terminal(sys.stderr))

    # SIGINT and SIGTERM (a scheduler's pre-emption) stop the run resumably: exit 130 / 143;
    # a second one exits at once (energon_plugins.convert.interrupt)
    where = f"{output} (built in its staging folder)" if output.startswith("msc://") else output
    stop = catch_stop_signals(
        f"Interrupted. Run the same command with --resume to continue from the last checkpoint in {where}."
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
            audio_token=audio_token,
            reencode=reencode,
            workers=workers,
            max_image_size=max_image_size,
            max_image_pixels=max_image_pixels,
            allow_outside=list(allow_outside),
            strict=strict,
            max_rejected=max_rejected,
            resume=resume,
            overwrite=overwrite,
            part=chosen,
            staging=staging,
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
