"""The self-contained HTML page of ``energon-plugins preview --html``.

One page, no external resources: images as base64 PNG, a strip of the sampled frames per
video (with its token count and span), a waveform strip per audio clip (with its length,
sampling rate, token count and span), the decoded text with image, video and audio runs
collapsed and loss spans highlighted, and for each row a bar of its segments (packed
sub-sequences and the padding tail) scaled to the sequence length.
"""

import base64
import html
import io
from typing import Any

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
.row{border:1px solid #ccc;border-radius:6px;padding:1em;margin:1em 0}
.bar{display:flex;height:18px;border:1px solid #999;margin:.5em 0;width:100%}
.seg{height:100%;border-right:1px solid #fff;box-sizing:border-box;font-size:11px;
     color:#fff;overflow:hidden;text-align:center}
.pad{background:#ddd;color:#666}
.text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:13px}
.loss{background:#d4f7d4;border-bottom:2px solid #2a2}
.img{background:#e8e0ff;color:#538;font-weight:bold}
.vid{background:#dff4f7;color:#266;font-weight:bold}
.aud{background:#fdecd2;color:#864;font-weight:bold}
.strip{display:flex;flex-wrap:wrap;align-items:center;gap:2px;margin:.3em 0}
.strip img{height:64px}
.strip.wave img{height:48px;image-rendering:auto}
.padtok{color:#aaa}
img{image-rendering:pixelated;height:128px;margin:2px;border:1px solid #aaa}
.meta{color:#666;font-size:12px}
.layout{border-collapse:collapse;font-size:13px}
.layout td,.layout th{padding:1px 12px 1px 0;text-align:left}
"""
_COLORS = ["#4a7fd4", "#d4774a", "#4ab07a", "#a04ad4", "#d4b84a", "#4ac0d4", "#d44a86"]


def image_to_png_base64(tensor: Any, mean: Any = None, std: Any = None) -> str | None:
    """A ``(C, H, W)`` float tensor (normalised) as a base64 PNG, or ``None`` if not an image."""
    import numpy as np
    from PIL import Image

    if tensor is None or tensor.dim() != 3 or tensor.shape[0] not in (1, 3):
        return None
    array = tensor.detach().float().cpu().numpy()
    if mean is not None and std is not None and len(mean) == array.shape[0]:
        array = array * np.asarray(std, dtype=np.float32)[:, None, None]
        array = array + np.asarray(mean, dtype=np.float32)[:, None, None]
    else:
        low, high = float(array.min()), float(array.max())
        array = (array - low) / (high - low) if high > low else array * 0
    array = (np.clip(array, 0.0, 1.0) * 255).round().astype("uint8").transpose(1, 2, 0)
    if array.shape[2] == 1:
        array = array[:, :, 0]
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def describe_video(index: int, video: dict[str, Any]) -> str:
    """``video 1: 4 frames, 16 tokens at [12:28]`` (what preview knows of one video)."""
    text = f"video {index + 1}: {len(video['frames'])} frames drawn"
    if video.get("tokens") is not None:
        text += f", {video['tokens']} tokens"
    if video.get("span") is not None:
        text += f" at [{video['span'][0]}:{video['span'][1]}]"
    return text


def render_layout(row: dict[str, Any]) -> str:
    """The table of the batch ``row`` belongs to, as the loop reads it: key, shape, dtype."""
    cells = []
    for field in row.get("fields", ()):
        shape = str(field.shape) if field.shape is not None else ""
        cells.append(
            f"<tr><td><code>{html.escape(field.name)}</code></td><td>{shape}</td>"
            f"<td>{html.escape(field.dtype or field.value)}</td></tr>"
        )
    return (
        f"<h2>batch {row.get('batch', 0)}: {html.escape(row.get('format', ''))}</h2>"
        "<table class='layout'><tr><th>key</th><th>shape</th><th>dtype / value</th></tr>"
        + "".join(cells)
        + "</table>"
    )


def render_page(title: str, rows: list[dict[str, Any]]) -> str:
    """The HTML page for ``rows``; each row has ``label``, ``segments``, ``width``,
    ``seq_length``, ``spans`` (per segment), ``images`` (base64 PNGs) and ``shapes``, and
    from ``collect_rows`` also ``key`` (its record), ``batch``, ``format``, ``fields`` (the
    layout of its batch as the loop reads it, shown once per batch), ``videos`` and ``audios``
    (:class:`~energon_plugins.preview.audio.AudioView`: a waveform strip per clip)."""
    from energon_plugins.preview.audio import describe_audio

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p class='meta'>Green: tokens with loss. Violet: collapsed image tokens. Teal: "
        "collapsed video tokens (each video's sampled frames in a strip). Orange: collapsed "
        "audio tokens (each clip's waveform as fed to the processor above them). "
        "The bar shows each row's segments (packed sub-sequences) and its padding in grey.</p>",
    ]
    shown_batch = None
    for row in rows:
        if row.get("fields") is not None and row.get("batch") != shown_batch:
            shown_batch = row.get("batch")
            parts.append(render_layout(row))
        parts.append("<div class='row'>")
        parts.append(f"<h3>{html.escape(row['label'])}</h3>")
        if row.get("key"):
            parts.append(f"<div class='meta'>record <code>{html.escape(row['key'])}</code></div>")
        parts.append(f"<div class='meta'>{html.escape(row['shapes'])}</div>")
        parts.append("<div class='bar'>")
        width = max(row["width"], 1)
        for index, segment in enumerate(row["segments"]):
            percent = 100.0 * segment.length / width
            if segment.padding:
                parts.append(
                    f"<div class='seg pad' style='width:{percent:.3f}%' "
                    f"title='padding: {segment.length} tokens'>pad</div>"
                )
            else:
                color = _COLORS[index % len(_COLORS)]
                parts.append(
                    f"<div class='seg' style='width:{percent:.3f}%;background:{color}' "
                    f"title='segment {index}: {segment.length} tokens'>{segment.length}</div>"
                )
        parts.append("</div>")
        if row.get("note"):
            parts.append(f"<p class='meta'>{html.escape(row['note'])}</p>")
        for image in row["images"]:
            parts.append(f"<img alt='image' src='data:image/png;base64,{image}'>")
        for index, video in enumerate(row.get("videos", ())):
            parts.append(
                f"<div class='strip'><span class='meta'>{html.escape(describe_video(index, video))}</span>"
            )
            for frame in video["frames"]:
                parts.append(f"<img alt='frame' src='data:image/png;base64,{frame}'>")
            parts.append("</div>")
        for index, audio in enumerate(row.get("audios", ())):
            parts.append(
                f"<div class='strip wave'><img alt='waveform' src='data:image/png;base64,{audio.png}'>"
                f"<span class='meta'>{html.escape(describe_audio(index, audio))}</span></div>"
            )
        for index, spans in enumerate(row["spans"]):
            parts.append(f"<p class='meta'>segment {index}</p><div class='text'>")
            for span in spans:
                text = html.escape(span.text)
                css = {"image": "img", "video": "vid", "audio": "aud", "pad": "padtok"}.get(span.kind, "")
                if span.loss:
                    css = f"{css} loss".strip()
                parts.append(f"<span class='{css}'>{text}</span>" if css else text)
            parts.append("</div>")
        parts.append("</div>")
    parts.append("</body></html>")
    return "".join(parts)
