"""``energon-plugins preview CONFIG [-n N] [--raw] [--html FILE]``: what the model will see.

Builds the datamodule from CONFIG (in this process: ``num_workers=0``) and shows N rows of the
batches the training loop will get: for each batch, the keys of the configured batch format
(``megatron-bridge`` by default: ``tokens``, ``labels``, ``visual_inputs.pixel_values``, ...)
with their shapes and dtypes; for each row, the record it came from (the batch's ``__keys__``,
or the task encoder's ``__key__``), the decoded text with image- and video-token runs
collapsed (``<image x576>``, ``[<|video_pad|> x64]``), the spans that carry loss marked, and
each video's token span. ``--raw`` shows the task encoder's batch instead (its fields before
the batch format, as earlier versions did). The text is decoded from the task encoder's batch
(labels aligned with the tokens) whichever is shown; the format is applied to that same batch
exactly as the loader's workers apply it. ``--html`` writes one self-contained page with the
images, a strip of the sampled frames per video, the text and a segment bar per row.
"""

from typing import Any

import click


def _image_stats(processor: Any) -> tuple[Any, Any]:
    inner = getattr(processor, "processor", processor)
    return getattr(inner, "image_mean", None), getattr(inner, "image_std", None)


RAW_LABEL = "the task encoder's batch (no batch format applied)"
"""How the shown batch is named when no batch format applies (``--raw``, ``batch_format: null``)."""


def collect_rows(datamodule: Any, count: int, batch_format: Any = None) -> list[dict[str, Any]]:
    """Take ``count`` rows from the training loader, each decoded into segments and spans.

    ``datamodule`` must yield the task encoder's batches (``batch_format=None``);
    ``batch_format`` (a registered name, ``{name, options}`` or a callable; None: none) is then
    applied to each, as the loader would, and every row carries the layout of that loop batch
    (``fields``, ``shapes``, ``format``) and its record key (``key``).
    """
    from energon_plugins.cli.batch_images import row_images, row_videos
    from energon_plugins.cli.batch_view import (
        Span,
        batch_layout,
        encoder_token_ids,
        encoder_video_token_id,
        layout_text,
        loop_batch_format,
        record_keys,
        render_spans,
        row_segments,
        video_spans,
    )
    from energon_plugins.cli.preview_html import image_to_png_base64

    tokenizer = datamodule.tokenizer
    image_id, ignore, pad_id = encoder_token_ids(datamodule)
    video_id = encoder_video_token_id(datamodule)
    encoder = datamodule.task_encoder
    image_processor = getattr(encoder, "image_processor", None) or datamodule.image_processor
    mean, std = _image_stats(image_processor)
    video_processor = getattr(encoder, "video_processor", None)
    video_mean, video_std = _image_stats(video_processor) if video_processor is not None else (mean, std)
    draw = getattr(encoder, "preview_images", None) or (
        lambda batch: row_images(batch, image_processor))
    draw_videos = getattr(encoder, "preview_videos", None) or (
        lambda batch: row_videos(batch, video_processor))
    fmt, format_label = loop_batch_format(datamodule, batch_format)
    rows: list[dict[str, Any]] = []
    for batch_index, batch in enumerate(datamodule.train_dataloader()):
        loop_batch = fmt(batch) if fmt is not None else batch
        fields = batch_layout(loop_batch)
        shapes = layout_text(fields)
        keys = record_keys(loop_batch, batch)
        sources = loop_batch.get("__sources__") if isinstance(loop_batch, dict) else None
        packed = getattr(batch, "packed_seq_params", None) is not None
        num_images = batch.num_images.tolist() if batch.num_images is not None else []
        num_videos = _as_list(getattr(batch, "num_videos", None))
        video_counts = iter(_as_list(getattr(batch, "video_token_counts", None)))
        drawable = draw(batch)
        drawable_videos = draw_videos(batch)
        for row in range(int(batch.input_ids.shape[0])):
            segments = row_segments(batch, row, pad_id, ignore)
            ids = batch.input_ids[row].tolist()
            labels = batch.labels[row].tolist()
            spans = []
            for segment in segments:
                if segment.padding:
                    spans.append([Span(f"<pad x{segment.length}>", "pad", False, segment.length)])
                else:
                    spans.append(render_spans(tokenizer, ids[segment.start:segment.end],
                                              labels[segment.start:segment.end], ignore, image_id,
                                              video_id))
            n_images = int(num_images[row]) if row < len(num_images) else 0
            images = [encoded for tensor in (drawable[row] if row < len(drawable) else [])
                      if (encoded := image_to_png_base64(tensor, mean, std))]
            note = ""
            if n_images and not images and batch.pixel_values is not None:
                note = (f"{n_images} image(s) in pixel values {tuple(batch.pixel_values.shape)} "
                        "(not rendered: a layout the preview cannot draw)")
            n_videos = int(num_videos[row]) if row < len(num_videos) else 0
            counts = [count for _, count in zip(range(n_videos), video_counts)]
            token_spans = video_spans(ids, video_id, counts)
            strips = drawable_videos[row] if row < len(drawable_videos) else []
            videos = [{
                "frames": [encoded for frame in (strips[i] if i < len(strips) else [])
                           if (encoded := image_to_png_base64(frame, video_mean, video_std))],
                "tokens": counts[i] if i < len(counts) else None,
                "span": token_spans[i] if i < len(token_spans) else None,
            } for i in range(n_videos)]
            key = keys[row] if row < len(keys) else None
            source = str(sources[row]) if sources is not None and row < len(sources) else None
            rows.append({
                "label": f"batch {batch_index} row {row}" + (" (packed)" if packed else ""),
                "segments": segments, "width": len(ids), "spans": spans, "images": images,
                "shapes": shapes, "num_images": n_images, "packed": packed, "note": note,
                "videos": videos, "key": key, "source": source, "batch": batch_index,
                "fields": fields,
                "format": f"{format_label}, as the training loop reads it" if fmt else RAW_LABEL,
            })
            if len(rows) >= count:
                return rows
    return rows


def _as_list(tensor: Any) -> list[int]:
    return [int(x) for x in tensor.tolist()] if tensor is not None else []


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
    it came from, loss spans green and underlined, image runs violet, video runs cyan, padding
    dim."""
    from rich.markup import escape

    from energon_plugins.cli._output import console
    from energon_plugins.cli.preview_html import describe_video

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
        out.rule(escape(f"{row['label']}: {real}/{row['width']} tokens, "
                        f"{row['num_images']} image(s), "
                        f"{sum(not s.padding for s in row['segments'])} segment(s)"))
        record = f"record {row['key']}" if row.get("key") else "record: no key in the batch"
        if row.get("source"):
            record += f" (source {row['source']})"
        out.print(f"[bold]{escape(record)}[/bold]", soft_wrap=True)  # whole keys, one line
        if row.get("fields") is None:
            out.print(f"[dim]{escape(row['shapes'])}[/dim]")
        for index, video in enumerate(row.get("videos", ())):
            out.print(f"[cyan]{escape(describe_video(index, video))}[/cyan]")
        for index, (segment, spans) in enumerate(zip(row["segments"], row["spans"])):
            if len(row["segments"]) > 1:
                out.print(f"[dim]-- segment {index} [{segment.start}:{segment.end}]"
                          f"{' padding' if segment.padding else ''} --[/dim]")
            text = []
            for span in spans:
                piece = escape(span.text)
                if span.kind == "image":
                    piece = f"[magenta]{piece}[/magenta]"
                elif span.kind == "video":
                    piece = f"[cyan]{piece}[/cyan]"
                elif span.kind == "pad":
                    piece = f"[dim]{piece}[/dim]"
                if span.loss:
                    piece = f"[green underline]⟦{piece}⟧[/green underline]"
                text.append(piece)
            out.print("".join(text))
    out.print("[dim]⟦…⟧ (green): tokens with loss; everything else is masked "
              "(label = ignore_index). The text is decoded from the task encoder's batch, "
              "before the batch format moves the labels where the loop expects them.[/dim]")


@click.command("preview")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("-n", "count", type=click.IntRange(min=1), default=4, show_default=True,
              help="How many rows (encoded sequences) to show.")
@click.option("--raw", is_flag=True,
              help="Show the task encoder's batch (its fields before the batch format) "
                   "instead of the batch the training loop reads.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML page to FILE.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key (dotted keys, YAML values); repeatable.")
def preview_command(config: str, count: int, raw: bool, html_path: str | None,
                    sets: tuple[str, ...]) -> None:
    """Show N rows of CONFIG's batches: the loop's keys, shapes and dtypes, each row's record,
    decoded text and masked spans."""
    from energon_plugins.cli._output import startup_status

    with startup_status(f"checking {config}...") as status:
        from energon_plugins.cli._startup import (
            build_datamodule_step_by_step,
            configured_batch_format,
        )
        from energon_plugins.config.overrides import parse_set_option

        if not (click.get_current_context().find_root().obj or {}).get("debug"):
            from energon_plugins.cli._output import quiet_known_warnings

            quiet_known_warnings()
        overrides = {"num_workers": 0, **dict(parse_set_option(item) for item in sets)}
        datamodule, checked = build_datamodule_step_by_step(config, overrides, status)
        status.update(f"reading {count} row(s) through the loader...")
        rows = collect_rows(datamodule, count,
                            None if raw else configured_batch_format(checked))
    print_rows(rows, datamodule.seq_length)
    if html_path:
        from pathlib import Path

        from energon_plugins.cli.preview_html import render_page

        Path(html_path).write_text(render_page(f"energon-plugins preview: {config}", rows),
                                   encoding="utf-8")
        click.echo(f"wrote {html_path}", err=True)
