"""``energon-plugins preview CONFIG [-n N] [--html FILE]``: what the model will see.

Builds the datamodule from CONFIG (in this process: ``num_workers=0``), takes the task
encoder's batches from the training loader (``batch_format`` left out: labels aligned with the
tokens, as the encoder made them) and shows N rows: the decoded text with image- and
video-token runs collapsed (``<image x576>``, ``[<|video_pad|> x64]``), the spans that carry
loss marked, each video's token span, and the tensor shapes. ``--html`` writes one
self-contained page with the images, a strip of the sampled frames per video, the text and a
segment bar per row.
"""

from typing import Any

import click


def _image_stats(processor: Any) -> tuple[Any, Any]:
    inner = getattr(processor, "processor", processor)
    return getattr(inner, "image_mean", None), getattr(inner, "image_std", None)


def collect_rows(datamodule: Any, count: int) -> list[dict[str, Any]]:
    """Take ``count`` rows from the training loader, each decoded into segments and spans."""
    from energon_plugins.cli.batch_images import row_images, row_videos
    from energon_plugins.cli.batch_view import (
        Span,
        batch_fields,
        encoder_token_ids,
        encoder_video_token_id,
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
    rows: list[dict[str, Any]] = []
    for batch_index, batch in enumerate(datamodule.train_dataloader()):
        fields = batch_fields(batch)
        shapes = ", ".join(
            f"{name} {tuple(value.shape)}" for name, value in fields.items() if hasattr(value, "shape")
        )
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
            rows.append({
                "label": f"batch {batch_index} row {row}" + (" (packed)" if packed else ""),
                "segments": segments, "width": len(ids), "spans": spans, "images": images,
                "shapes": shapes, "num_images": n_images, "packed": packed, "note": note,
                "videos": videos, "key": str(batch.__key__[row]) if batch.__key__ else None,
            })
            if len(rows) >= count:
                return rows
    return rows


def _as_list(tensor: Any) -> list[int]:
    return [int(x) for x in tensor.tolist()] if tensor is not None else []


def print_rows(rows: list[dict[str, Any]], seq_length: int) -> None:
    """Print rows with rich: loss spans green and underlined, image runs violet, video runs
    cyan, padding dim."""
    from rich.markup import escape

    from energon_plugins.cli._output import console
    from energon_plugins.cli.preview_html import describe_video

    out = console()
    for row in rows:
        real = sum(s.length for s in row["segments"] if not s.padding)
        out.rule(f"{row['label']}: {real}/{row['width']} tokens, {row['num_images']} image(s), "
                 f"{sum(not s.padding for s in row['segments'])} segment(s)")
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
