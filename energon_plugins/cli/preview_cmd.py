"""``energon-plugins preview CONFIG [-n N] [--raw] [--html FILE]``: what the model will see.

Builds the datamodule from CONFIG (in this process: ``num_workers=0``) and shows N rows of the
batches the training loop will get: for each batch, the keys of the configured batch format
(``megatron-bridge`` by default: ``tokens``, ``labels``, ``visual_inputs.pixel_values``, ...)
with their shapes and dtypes; for each row, the record it came from (the batch's ``__keys__``,
or the task encoder's ``__key__``), the decoded text with image-, video- and audio-token runs
collapsed (``<image x576>``, ``[<|video_pad|> x64]``, ``[<|AUDIO|> x38]``), the spans that
carry loss marked, each video's token span, and each audio clip's with a sparkline of the
waveform fed to the processor, its length in seconds and its sampling rate. ``--raw`` shows
the task encoder's batch instead (its fields before the batch format, as earlier versions
did). The text is decoded from the task encoder's batch (labels aligned with the tokens)
whichever is shown; the format is applied to that same batch exactly as the loader's workers
apply it. ``--html`` writes one self-contained page with the images, a strip of the sampled
frames per video, a waveform strip per audio clip, the text and a segment bar per row. For a
blend (a metadataset with ``blend:`` weights), a last table sets each source's configured share
beside its realised shares of the samples, tokens and loss tokens the preview read.
"""

from typing import Any

import click

from energon_plugins.cli._config_options import datamodule_for, set_option


def print_layout(out: Any, row: dict[str, Any]) -> None:
    """Print the batch ``row`` belongs to as the loop reads it: a table of its keys (nested
    objects as dotted keys) with shape and dtype, under a line naming the batch format."""
    from rich.markup import escape
    from rich.table import Table

    out.print(f"[bold]batch {row.get('batch', 0)}[/bold]: {escape(row.get('format', ''))}")
    table = Table(box=None, padding=(0, 2), show_edge=False, header_style="dim")
    table.add_column("key")
    table.add_column("shape")
    table.add_column("dtype / value")
    for field in row.get("fields", ()):
        shape = str(field.shape) if field.shape is not None else ""
        table.add_row(escape(field.name), shape, escape(field.dtype or field.value))
    out.print(table)


def print_rows(rows: list[dict[str, Any]], seq_length: int) -> None:
    """Print rows with rich: before each batch its keys, shapes and dtypes; per row the record
    it came from, loss spans green and underlined, image runs violet, video runs cyan, audio
    runs yellow (each clip's sparkline above), padding dim."""
    from rich.markup import escape

    from energon_plugins.cli._output import console
    from energon_plugins.preview.audio import describe_audio
    from energon_plugins.preview.html import describe_video

    out = console()
    shown_batch, shown_fields = None, None
    for row in rows:
        if row.get("fields") is not None and row.get("batch") != shown_batch:
            shown_batch = row.get("batch")
            if row["fields"] == shown_fields:
                out.print(f"[bold]batch {shown_batch}[/bold]: the same keys, shapes and dtypes")
            else:
                print_layout(out, row)
                shown_fields = row["fields"]
        real = sum(s.length for s in row["segments"] if not s.padding)
        audios = f"{len(row['audios'])} audio clip(s), " if row.get("audios") else ""
        out.rule(
            escape(
                f"{row['label']}: {real}/{row['width']} tokens, "
                f"{row['num_images']} image(s), {audios}"
                f"{sum(not s.padding for s in row['segments'])} segment(s)"
            )
        )
        record = f"record {row['key']}" if row.get("key") else "record: no key in the batch"
        if row.get("source"):
            record += f" (source {row['source']})"
        out.print(f"[bold]{escape(record)}[/bold]", soft_wrap=True)  # whole keys, one line
        if row.get("fields") is None:
            out.print(f"[dim]{escape(row['shapes'])}[/dim]")
        for index, video in enumerate(row.get("videos", ())):
            out.print(f"[cyan]{escape(describe_video(index, video))}[/cyan]")
        for index, audio in enumerate(row.get("audios", ())):
            label, _, details = describe_audio(index, audio).partition(": ")
            out.print(
                f"[yellow]{escape(label)}: {audio.sparkline} {escape(details)}[/yellow]", soft_wrap=True
            )
        for index, (segment, spans) in enumerate(zip(row["segments"], row["spans"])):
            if len(row["segments"]) > 1:
                out.print(
                    f"[dim]-- segment {index} [{segment.start}:{segment.end}]"
                    f"{' padding' if segment.padding else ''} --[/dim]"
                )
            text = []
            for span in spans:
                piece = escape(span.text)
                if span.kind == "image":
                    piece = f"[magenta]{piece}[/magenta]"
                elif span.kind == "video":
                    piece = f"[cyan]{piece}[/cyan]"
                elif span.kind == "audio":
                    piece = f"[yellow]{piece}[/yellow]"
                elif span.kind == "pad":
                    piece = f"[dim]{piece}[/dim]"
                if span.loss:
                    piece = f"[green underline]⟦{piece}⟧[/green underline]"
                text.append(piece)
            out.print("".join(text))
    out.print(
        "[dim]⟦…⟧ (green): tokens with loss; everything else is masked "
        "(label = ignore_index). The text is decoded from the task encoder's batch, "
        "before the batch format moves the labels where the loop expects them.[/dim]"
    )


@click.command("preview")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="How many rows (encoded sequences) to show.",
)
@click.option(
    "--raw",
    is_flag=True,
    help="Show the task encoder's batch (its fields before the batch format) "
    "instead of the batch the training loop reads.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a self-contained HTML page to FILE.",
)
@set_option()
def preview_command(config: str, count: int, raw: bool, html_path: str | None, sets: tuple[str, ...]) -> None:
    """Show N rows of CONFIG's batches: the loop's keys, shapes and dtypes, each row's record,
    decoded text and masked spans."""
    from energon_plugins.cli._output import startup_status

    with startup_status(f"checking {config}...") as status:
        from energon_plugins.loading.startup import configured_batch_format
        from energon_plugins.preview.rows import collect_rows

        datamodule, checked = datamodule_for(config, sets, status, defaults={"num_workers": 0})
        status.update(f"reading {count} row(s) through the loader...")
        rows = collect_rows(datamodule, count, None if raw else configured_batch_format(checked))
    print_rows(rows, datamodule.seq_length)
    from energon_plugins.loading.mix_report import datamodule_mix

    mix = datamodule_mix(datamodule)
    if mix is not None:
        from energon_plugins.cli._output import console
        from energon_plugins.preview.mix_view import mix_table

        console().print(mix_table(mix))
    if html_path:
        from pathlib import Path

        from energon_plugins.preview.html import render_page

        Path(html_path).write_text(render_page(f"energon-plugins preview: {config}", rows), encoding="utf-8")
        click.echo(f"wrote {html_path}", err=True)
