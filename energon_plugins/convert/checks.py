"""The checks every record passes, whatever its source format, and the sample it becomes.

:func:`check_turns` (roles alternate, answers are not empty, one placeholder per image),
:func:`check_image` (the header declares no more pixels than the cap, then the bytes decode;
JPEGs are decoded at 1/8 scale in the DCT domain, which still reads every coded block) and
:func:`sample_parts` (the tar parts of one sample: the ``json`` conversation and the images
``0.jpg``, ``1.png``, ... as their original bytes, re-encoded only when asked or when the
format is not one of :data:`EXTENSION_OF_FORMAT`).
"""

import io
import json
import re
import warnings
from typing import Literal

from energon_plugins.convert.formats.media import current_media_limits
from energon_plugins.convert.records import RecordError, SourceRecord

FROM_ROLE = {"system": "system", "user": "human", "assistant": "gpt"}
"""ChatML roles -> the GPT-style ``from`` values the crude ``chatml`` format stores."""

EXTENSION_OF_FORMAT = {
    "JPEG": "jpg",
    "MPO": "jpg",
    "PNG": "png",
    "WEBP": "webp",
    "GIF": "gif",
    "BMP": "bmp",
    "TIFF": "tiff",
}
"""PIL formats stored as they are, with the extension Energon's decoder reads them by (all in
:data:`energon_plugins.encoding.chat.chatml.IMAGE_EXTENSIONS`, the parts the cooker takes); any
other format is re-encoded as PNG."""

Reencode = Literal["png", "jpeg"] | None


def check_turns(turns: list[dict[str, str]], num_images: int, image_token: str) -> None:
    """Check the shape of a conversation.

    Raises:
        RecordError: ``roles`` (not system?, user, assistant, user, ..., assistant),
            ``empty_answer`` (an assistant turn with no text), ``placeholder_mismatch``.
    """
    roles = [turn["role"] for turn in turns]
    start = 1 if roles and roles[0] == "system" else 0
    body = roles[start:]
    if not body:
        raise RecordError("roles", "the conversation has no user or assistant turn")
    for offset, role in enumerate(body):
        expected = "user" if offset % 2 == 0 else "assistant"
        if role != expected:
            raise RecordError(
                "roles",
                f"turn {start + offset} is {role!r} where {expected!r} was expected "
                f"(roles: {', '.join(roles)})",
            )
    if body[-1] != "assistant":
        raise RecordError("roles", f"the conversation ends with a user turn (roles: {', '.join(roles)})")
    for i, turn in enumerate(turns):
        if turn["role"] == "assistant" and not turn["content"].strip():
            raise RecordError("empty_answer", f"turn {i} (assistant) is empty")
    tags = sum(turn["content"].count(image_token) for turn in turns)
    if tags != num_images:
        raise RecordError(
            "placeholder_mismatch",
            f"the turns hold {tags} {image_token!r} placeholder(s) but the record has {num_images} image(s)",
        )


def check_image(
    data: bytes, index: int, reencode: Reencode, max_pixels: int | None = None
) -> tuple[str, bytes]:
    """``(extension, bytes)`` to store for one image, after checking its header declares at
    most ``max_pixels`` (default: :func:`~energon_plugins.convert.formats.media.current_media_limits`)
    and then that it decodes.

    Raises:
        RecordError: ``missing_image`` (no bytes), ``too_many_pixels`` (seen in the header,
            before decoding; Pillow's own bomb guard gives the same reason),
            ``undecodable_image`` (PIL cannot decode it).
    """
    from PIL import Image

    if not data:
        raise RecordError("missing_image", f"image {index} has no bytes")
    if max_pixels is None:
        max_pixels = current_media_limits().max_image_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:  # reads the header only
                width, height = image.size
                if width * height > max_pixels:
                    raise RecordError(
                        "too_many_pixels",
                        f"image {index} declares {width}x{height} = "
                        f"{width * height} pixels, more than the {max_pixels} allowed "
                        "(--max-image-pixels); not decoded",
                    )
                kind = image.format or ""
                extension = EXTENSION_OF_FORMAT.get(kind)
                if reencode is None and extension is not None:
                    if kind in ("JPEG", "MPO"):
                        image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
                    image.load()
                    return extension, data
                return _reencode(image, reencode or "png")
    except RecordError:
        raise
    except Image.DecompressionBombError as exc:
        raise RecordError("too_many_pixels", f"image {index}: {exc}; not decoded") from None
    except Exception as exc:  # noqa: BLE001 - any decoder failure is this record's problem
        detail = re.sub(r"<[^<>]* at 0x[0-9a-fA-F]+>", "the bytes", str(exc))  # no addresses
        raise RecordError(
            "undecodable_image", f"image {index} does not decode: {type(exc).__name__}: {detail}"
        ) from None


def _reencode(image, target: str) -> tuple[str, bytes]:
    buffer = io.BytesIO()
    if target == "jpeg":
        image.convert("RGB").save(buffer, format="JPEG", quality=95)
        return "jpg", buffer.getvalue()
    if image.mode not in ("1", "L", "LA", "RGB", "RGBA", "I", "P"):
        image = image.convert("RGBA" if "A" in image.mode else "RGB")
    image.save(buffer, format="PNG")
    return "png", buffer.getvalue()


def sample_parts(
    record: SourceRecord,
    location: str,
    *,
    image_token: str,
    reencode: Reencode,
    max_pixels: int | None = None,
) -> list[tuple[str, bytes]]:
    """Check ``record`` and return its tar parts: ``json`` first, then ``0.<ext>``, ``1.<ext>``...
    (``max_pixels``: see :func:`check_image`).

    The ``json`` part is ``{"conversations": [{"from": "system" | "human" | "gpt", "value":
    ...}], "id": ..., "source": location}``.

    Raises:
        RecordError: the record fails a check.
    """
    check_turns(record.turns, len(record.images), image_token)
    images = [check_image(data, i, reencode, max_pixels) for i, data in enumerate(record.images)]
    meta = {
        "conversations": [{"from": FROM_ROLE[t["role"]], "value": t["content"]} for t in record.turns],
        "id": record.id,
        "source": location,
    }
    parts = [("json", json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode())]
    parts += [(f"{i}.{extension}", data) for i, (extension, data) in enumerate(images)]
    return parts
