"""The checks every record passes, whatever its source format, and the sample it becomes.

:func:`check_turns` (roles alternate, answers are not empty, one placeholder per image and
one per audio clip), :func:`check_image` (the header declares no more pixels than the cap, then
the bytes decode; JPEGs are decoded at 1/8 scale in the DCT domain, which still reads every
coded block), :func:`check_audio` (PyAV finds an audio stream and decodes all of it) and
:func:`sample_parts` (the tar parts of one sample: the ``json`` conversation, the images
``0.jpg``, ``1.png``, ... as their original bytes, re-encoded only when asked or when the
format is not one of :data:`EXTENSION_OF_FORMAT`, and the audio clips ``0.wav``, ``1.flac``,
... as their original bytes).
"""

import io
import json
import re
import warnings
from typing import Literal

from energon_plugins.convert.formats.audio import AUDIO_EXTENSIONS, DEFAULT_AUDIO_TOKEN
from energon_plugins.convert.formats.media import current_media_limits
from energon_plugins.convert.records import AudioClip, RecordError, SourceRecord

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

EXTENSION_OF_CONTAINER = {"wav": "wav", "flac": "flac", "mp3": "mp3", "ogg": "ogg", "mov": "m4a"}
"""PyAV (FFmpeg) demuxer names -> the audio part extension of embedded audio without a file
name (``mov`` stands for ``mov,mp4,m4a,3gp,3g2,mj2``, the first name listed)."""

Reencode = Literal["png", "jpeg"] | None


def check_turns(
    turns: list[dict[str, str]],
    num_images: int,
    image_token: str,
    num_audios: int = 0,
    audio_token: str = DEFAULT_AUDIO_TOKEN,
) -> None:
    """Check the shape of a conversation.

    Raises:
        RecordError: ``roles`` (not system?, user, assistant, user, ..., assistant),
            ``empty_answer`` (an assistant turn with no text), ``placeholder_mismatch`` (of
            images, or of audio clips).
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
    tags = sum(turn["content"].count(audio_token) for turn in turns)
    if tags != num_audios:
        raise RecordError(
            "placeholder_mismatch",
            f"the turns hold {tags} {audio_token!r} placeholder(s) but the record has "
            f"{num_audios} audio clip(s)",
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


def check_audio(clip: AudioClip, index: int) -> tuple[str, bytes]:
    """``(extension, bytes)`` to store for audio clip ``index``, after PyAV found an audio
    stream in it and decoded that stream to its end; a clip without an extension gets its
    container's.

    Raises:
        RecordError: ``missing_audio`` (no bytes), ``undecodable_audio`` (not a container
            FFmpeg reads, no audio stream, no decodable frame, a decoder error),
            ``audio_format`` (embedded bytes in another container than wav, flac, mp3, m4a,
            ogg).
    """
    import av

    extension, data = clip
    if not data:
        raise RecordError("missing_audio", f"audio {index} has no bytes")
    try:
        with av.open(io.BytesIO(data), "r") as container:
            if not container.streams.audio:
                raise RecordError("undecodable_audio", f"audio {index} holds no audio stream")
            demuxer = container.format.name.split(",")[0]
            frames = sum(1 for _ in container.decode(audio=0))
    except RecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - any demuxer or decoder failure is this record's problem
        detail = re.sub(r":\s*'<none>'$", "", str(exc))  # PyAV names no file for bytes
        raise RecordError(
            "undecodable_audio", f"audio {index} does not decode: {type(exc).__name__}: {detail}"
        ) from None
    if not frames:
        raise RecordError("undecodable_audio", f"audio {index} holds no decodable audio frame")
    if extension is None:
        extension = EXTENSION_OF_CONTAINER.get(demuxer)
        if extension not in AUDIO_EXTENSIONS:
            raise RecordError(
                "audio_format",
                f"audio {index} is embedded {demuxer!r} audio without a file name; store "
                f"{', '.join(AUDIO_EXTENSIONS)} (or give its path, whose extension names it)",
            )
    return extension, data


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
    audio_token: str = DEFAULT_AUDIO_TOKEN,
) -> list[tuple[str, bytes]]:
    """Check ``record`` and return its tar parts: ``json`` first, then the images ``0.<ext>``,
    ``1.<ext>``..., then the audio clips ``0.wav``, ``1.flac``... (``max_pixels``: see
    :func:`check_image`).

    The ``json`` part is ``{"conversations": [{"from": "system" | "human" | "gpt", "value":
    ...}], "id": ..., "source": location}``.

    Raises:
        RecordError: the record fails a check.
    """
    audios = list(getattr(record, "audios", None) or ())  # a plugin's own record may have none
    check_turns(record.turns, len(record.images), image_token, len(audios), audio_token)
    images = [check_image(data, i, reencode, max_pixels) for i, data in enumerate(record.images)]
    clips = [check_audio(AudioClip(*clip), i) for i, clip in enumerate(audios)]
    meta = {
        "conversations": [{"from": FROM_ROLE[t["role"]], "value": t["content"]} for t in record.turns],
        "id": record.id,
        "source": location,
    }
    parts = [("json", json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode())]
    parts += [(f"{i}.{extension}", data) for i, (extension, data) in enumerate(images)]
    parts += [(f"{i}.{extension}", data) for i, (extension, data) in enumerate(clips)]
    return parts
