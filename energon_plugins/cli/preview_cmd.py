"""``energon-plugins preview CONFIG [-n N] [--html FILE]``: what the model will see.

Builds the datamodule from CONFIG (in this process: ``num_workers=0``), takes the task
encoder's batches from the training loader (``batch_format`` left out: labels aligned with the
tokens, as the encoder made them) and shows N rows: the decoded text with image-token runs collapsed
(``<image x576>``), the spans that carry loss marked, and the tensor shapes. ``--html`` writes
one self-contained page with the images, the text and a segment bar per row.
"""

from typing import Any

import click


def _image_stats(processor: Any) -> tuple[Any, Any]:
    inner = getattr(processor, "processor", processor)
    return getattr(inner, "image_mean", None), getattr(inner, "image_std", None)


def collect_rows(datamodule: Any, count: int) -> list[dict[str, Any]]:
    """Take ``count`` rows from the training loader, each decoded into segments and spans."""
    from energon_plugins.cli.batch_view import (
        Span,
        batch_fields,
        encoder_token_ids,
        render_spans,
        row_segments,
    )
    from energon_plugins.cli.preview_html import image_to_png_base64

    from energon_plugins.cli.batch_images import row_images

    tokenizer = datamodule.tokenizer
    image_id, ignore, pad_id = encoder_token_ids(datamodule)
    encoder = datamodule.task_encoder
    image_processor = getattr(encoder, "image_processor", None) or datamodule.image_processor
    mean, std = _image_stats(image_processor)
    draw = getattr(encoder, "preview_images", None) or (
        lambda batch: row_images(batch, image_processor))
    rows: list[dict[str, Any]] = []
    for batch_index, batch in enumerate(datamodule.train_dataloader()):
        fields = batch_fields(batch)
        shapes = ", ".join(
            f"{name} {tuple(value.shape)}" for name, value in fields.items() if hasattr(value, "shape")
        )
        packed = getattr(batch, "packed_seq_params", None) is not None
        num_images = batch.num_images.tolist() if batch.num_images is not None else []
        drawable = draw(batch)
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
                                              labels[segment.start:segment.end], ignore, image_id))
            n_images = int(num_images[row]) if row < len(num_images) else 0
            images = [encoded for tensor in (drawable[row] if row < len(drawable) else [])
                      if (encoded := image_to_png_base64(tensor, mean, std))]
            note = ""
            if n_images and not images and batch.pixel_values is not None:
                note = (f"{n_images} image(s) in pixel values {tuple(batch.pixel_values.shape)} "
                        "(not rendered: a layout the preview cannot draw)")
            rows.append({
                "label": f"batch {batch_index} row {row}" + (" (packed)" if packed else ""),
                "segments": segments, "width": len(ids), "spans": spans, "images": images,
                "shapes": shapes, "num_images": n_images, "packed": packed, "note": note,
            })
            if len(rows) >= count:
                return rows
    return rows


def print_rows(rows: list[dict[str, Any]], seq_length: int) -> None:
    """Print rows with rich: loss spans green and underlined, image runs violet, padding dim."""
    from rich.markup import escape

    from energon_plugins.cli._output import console

    out = console()
    for row in rows:
        real = sum(s.length for s in row["segments"] if not s.padding)
        out.rule(f"{row['label']}: {real}/{row['width']} tokens, {row['num_images']} image(s), "
                 f"{sum(not s.padding for s in row['segments'])} segment(s)")
        out.print(f"[dim]{escape(row['shapes'])}[/dim]")
        for index, (segment, spans) in enumerate(zip(row["segments"], row["spans"])):
            if len(row["segments"]) > 1:
                out.print(f"[dim]-- segment {index} [{segment.start}:{segment.end}]"
                          f"{' padding' if segment.padding else ''} --[/dim]")
            text = []
            for span in spans:
                piece = escape(span.text)
                if span.kind == "image":
                    piece = f"[magenta]{piece}[/magenta]"
                elif span.kind == "pad":
                    piece = f"[dim]{piece}[/dim]"
                if span.loss:
                    piece = f"[green underline]⟦{piece}⟧[/green underline]"
                text.append(piece)
            out.print("".join(text))
    out.print("[dim]⟦…⟧ (green): tokens with loss; everything else is masked "
              "(label = ignore_index).[/dim]")


@click.command("preview")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("-n", "count", type=click.IntRange(min=1), default=4, show_default=True,
              help="How many rows (encoded sequences) to show.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML page to FILE.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config key (dotted keys, YAML values); repeatable.")
def preview_command(config: str, count: int, html_path: str | None, sets: tuple[str, ...]) -> None:
    """Show N encoded samples of CONFIG: decoded text, masked spans, tensor shapes."""
    from energon_plugins.config.build import build_datamodule
    from energon_plugins.config.overrides import parse_set_option

    if not (click.get_current_context().find_root().obj or {}).get("debug"):
        from energon_plugins.cli._output import quiet_known_warnings

        quiet_known_warnings()
    overrides = {"num_workers": 0, **dict(parse_set_option(item) for item in sets),
                 "batch_format": None}
    datamodule = build_datamodule(config, **overrides)
    rows = collect_rows(datamodule, count)
    print_rows(rows, datamodule.seq_length)
    if html_path:
        from pathlib import Path

        from energon_plugins.cli.preview_html import render_page

        Path(html_path).write_text(render_page(f"energon-plugins preview: {config}", rows),
                                   encoding="utf-8")
        click.echo(f"wrote {html_path}", err=True)
