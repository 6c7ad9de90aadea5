"""The rows ``preview`` shows: each batch of a datamodule, row by row, with its spans,
images, videos, audio clips, record keys and the batch the training loop gets.

Used by ``energon-plugins preview`` (text and HTML) and by plugin tests that check what a
user would see.
"""

from typing import Any


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
    (``fields``, ``shapes``, ``format``) and its record key (``key``). Rows with audio carry
    ``audios``: one :class:`~energon_plugins.preview.audio.AudioView` per clip, drawn from the
    waveforms the encoder fed its processor.
    """
    from energon_plugins.preview.audio import (
        audio_token_runs,
        audio_views,
        encoder_audio_token_id,
        keep_preview_audio,
        row_audio_clips,
    )
    from energon_plugins.preview.batch_view import (
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
    from energon_plugins.preview.html import image_to_png_base64
    from energon_plugins.preview.images import row_images, row_videos

    tokenizer = datamodule.tokenizer
    image_id, ignore, pad_id = encoder_token_ids(datamodule)
    video_id = encoder_video_token_id(datamodule)
    audio_id = encoder_audio_token_id(datamodule)
    encoder = datamodule.task_encoder
    keep_preview_audio(encoder)
    image_processor = getattr(encoder, "image_processor", None) or datamodule.image_processor
    mean, std = _image_stats(image_processor)
    video_processor = getattr(encoder, "video_processor", None)
    video_mean, video_std = _image_stats(video_processor) if video_processor is not None else (mean, std)
    draw = getattr(encoder, "preview_images", None) or (lambda batch: row_images(batch, image_processor))
    draw_videos = getattr(encoder, "preview_videos", None) or (
        lambda batch: row_videos(batch, video_processor)
    )
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
        clips = row_audio_clips(encoder, batch)
        for row in range(int(batch.input_ids.shape[0])):
            segments = row_segments(batch, row, pad_id, ignore)
            ids = batch.input_ids[row].tolist()
            labels = batch.labels[row].tolist()
            spans = []
            for segment in segments:
                if segment.padding:
                    spans.append([Span(f"<pad x{segment.length}>", "pad", False, segment.length)])
                else:
                    spans.append(
                        render_spans(
                            tokenizer,
                            ids[segment.start : segment.end],
                            labels[segment.start : segment.end],
                            ignore,
                            image_id,
                            video_id,
                            audio_id,
                        )
                    )
            n_images = int(num_images[row]) if row < len(num_images) else 0
            images = [
                encoded
                for tensor in (drawable[row] if row < len(drawable) else [])
                if (encoded := image_to_png_base64(tensor, mean, std))
            ]
            note = ""
            if n_images and not images and batch.pixel_values is not None:
                note = (
                    f"{n_images} image(s) in pixel values {tuple(batch.pixel_values.shape)} "
                    "(not rendered: a layout the preview cannot draw)"
                )
            n_videos = int(num_videos[row]) if row < len(num_videos) else 0
            counts = [count for _, count in zip(range(n_videos), video_counts)]
            token_spans = video_spans(ids, video_id, counts)
            strips = drawable_videos[row] if row < len(drawable_videos) else []
            videos = [
                {
                    "frames": [
                        encoded
                        for frame in (strips[i] if i < len(strips) else [])
                        if (encoded := image_to_png_base64(frame, video_mean, video_std))
                    ],
                    "tokens": counts[i] if i < len(counts) else None,
                    "span": token_spans[i] if i < len(token_spans) else None,
                }
                for i in range(n_videos)
            ]
            runs = audio_token_runs(ids, audio_id)
            audios = audio_views(clips[row], runs)
            if len(runs) > len(audios):
                note = (note + " " if note else "") + (
                    f"{len(runs) - len(audios)} audio clip(s) in the ids not drawn "
                    "(the task encoder kept no waveform for them)"
                )
            key = keys[row] if row < len(keys) else None
            source = str(sources[row]) if sources is not None and row < len(sources) else None
            rows.append(
                {
                    "label": f"batch {batch_index} row {row}" + (" (packed)" if packed else ""),
                    "segments": segments,
                    "width": len(ids),
                    "spans": spans,
                    "images": images,
                    "shapes": shapes,
                    "num_images": n_images,
                    "packed": packed,
                    "note": note,
                    "videos": videos,
                    "audios": audios,
                    "key": key,
                    "source": source,
                    "batch": batch_index,
                    "fields": fields,
                    "format": f"{format_label}, as the training loop reads it" if fmt else RAW_LABEL,
                }
            )
            if len(rows) >= count:
                return rows
    return rows


def _as_list(tensor: Any) -> list[int]:
    return [int(x) for x in tensor.tolist()] if tensor is not None else []
