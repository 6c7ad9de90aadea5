"""The conversation sample the encoders read: ``ChatMLSample`` and the crude-data cookers.

Energon has no conversation sample type, so conversations travel as crude data
(``CrudeWebdataset`` with ``subflavors: {format: chatml}``, what ``energon-plugins convert``
writes; ``llava`` and ``conversation`` are read the same way) and a task encoder cooks them
with :func:`cook_chatml` (:data:`CHATML_COOKER`, or :func:`conversation_cookers` for several
formats). A crude conversation sample holds:

- its images as numbered parts ``0.jpg``, ``1.png``, ... (any image extension Energon's
  decoder knows, ordered by their number), or as one ``png`` / ``jpg`` / ``jpeg`` / ``image``
  part (the LLaVA-1.5 layout);
- its videos likewise as numbered parts ``0.mp4``, ``1.webm``, ... or one ``mp4`` / ``webm`` /
  ... part (Energon hands them over as lazy ``AVDecoder`` objects);
- its audio clips likewise as numbered parts ``0.wav``, ``1.flac``, ... (``wav``, ``flac``,
  ``mp3``, ``m4a``, ``ogg``: an ``AVDecoder`` for the first three, raw bytes for the others),
  or as a video container whose audio track is the clip, named ``2.audio.mp4`` (any of
  :data:`VIDEO_EXTENSIONS` after ``N.audio.``: never taken for a video part);
- a ``json`` part with the turns under ``conversations``, ``messages`` or ``conversation``
  (or the list of turns itself): GPT-style ``{"from", "value"}`` (LLaVA, ShareGPT) or ChatML
  ``{"role", "content"}`` turns, a content being a string with ``<image>`` tags or a list of
  typed parts (``{"type": "text", "text": ...}``, ``{"type": "image"}``, ``{"type": "video"}``).

The cooker turns it into ChatML turns, ``{"role": "user" | "assistant" | "system",
"content": ...}`` (the layout Megatron-Bridge calls ChatMLSample); the image and video tags
(``<image>``, ``<video>``, or typed parts) mark where each image and video goes, in order.
"""

import dataclasses
import re
from typing import Any

from megatron.energon import Cooker, Sample, basic_sample_keys, edataclass, stateless

from energon_plugins.encoding.chat.conversation import chat_turns

CHATML_FORMAT = "chatml"
"""The ``format`` subflavor of crude conversation datasets (what ``convert`` writes)."""

CONVERSATION_FORMATS = (CHATML_FORMAT, "llava", "conversation")
"""Every ``format`` subflavor :func:`cook_chatml` reads."""

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff")
"""Image part extensions a crude conversation sample may hold (Energon decodes them all)."""

SINGLE_IMAGE_PARTS = ("png", "jpg", "jpeg", "image")
"""Part names of the one image of a LLaVA-1.5 style sample."""

TURN_KEYS = ("conversations", "messages", "conversation")
"""Keys of the ``json`` part that may hold the turns."""

VIDEO_EXTENSIONS = ("mp4", "webm", "mkv", "mov", "avi", "flv")
"""Part extensions Energon's AV decoder reads as video (its audio ones aside)."""

AUDIO_EXTENSIONS = ("wav", "flac", "mp3", "m4a", "ogg")
"""Part extensions a crude conversation sample's audio clips may have (numbered: ``0.wav``)."""

AUDIO_IN_VIDEO = "audio"
"""The infix of an audio part held in a video container: ``0.audio.mp4`` is an audio clip (the
container's audio track), ``0.mp4`` a video."""

_IMAGE_PART = re.compile(rf"^(\d+)\.({'|'.join(IMAGE_EXTENSIONS)})$")
_VIDEO_PART = re.compile(rf"^(\d+)\.({'|'.join(VIDEO_EXTENSIONS)})$")
_AUDIO_PART = re.compile(
    rf"^(\d+)\.({'|'.join(AUDIO_EXTENSIONS)}|{AUDIO_IN_VIDEO}\.(?:{'|'.join(VIDEO_EXTENSIONS)}))$"
)


class MissingFieldError(KeyError):
    """A crude sample lacks a part or a JSON field the cooker needs (the message names it)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


@edataclass
class ChatMLSample(Sample):
    """A multi-turn ChatML conversation and its images and videos, in the order they appear.

    Attributes:
        conversation: ``[{"role": ..., "content": ...}, ...]``; a content is a string whose
            image and video tags (``<image>``, ``<video>``) mark where each medium goes, or a
            list of typed parts.
        images: the images as Energon decoded them.
        videos: the videos in the order of their tags (Energon's lazy ``AVDecoder``).
        video_parts: the part name of each video (``0.mp4``), for error messages.
        audios: the audio clips in the order of their tags (Energon's lazy ``AVDecoder``, or
            the file's bytes for an extension Energon does not decode: ``m4a``, ``ogg``); a
            ``N.audio.mp4`` part is a video container whose audio track is the clip.
        audio_parts: the part name of each audio clip (``0.wav``), for error messages.
    """

    conversation: list[dict[str, Any]]
    images: list[Any]
    videos: list[Any] = dataclasses.field(default_factory=list)
    video_parts: list[str] = dataclasses.field(default_factory=list)
    audios: list[Any] = dataclasses.field(default_factory=list)
    audio_parts: list[str] = dataclasses.field(default_factory=list)


def image_parts(sample: dict) -> list[str]:
    """The names of a crude sample's image parts: the numbered ones (``0.png``, ``1.jpg``,
    ...) in order, else its single image part (``png``, ``jpg``, ``jpeg``, ``image``)."""
    found = []
    for name in sample:
        match = _IMAGE_PART.match(name)
        if match:
            found.append((int(match.group(1)), name))
    if found:
        return [name for _, name in sorted(found)]
    return [name for name in SINGLE_IMAGE_PARTS if name in sample][:1]


def video_parts(sample: dict) -> list[str]:
    """The names of a crude sample's video parts: numbered ones (``0.mp4``, ``1.webm``...) in
    order, else its single ``mp4`` / ``webm`` / ... part."""
    numbered = sorted((int(m.group(1)), name) for name in sample if (m := _VIDEO_PART.match(name)))
    if numbered:
        return [name for _, name in numbered]
    return [name for name in VIDEO_EXTENSIONS if name in sample][:1]


def audio_parts(sample: dict) -> list[str]:
    """The names of a crude sample's numbered audio parts (``0.wav``, ``1.flac``, ``2.audio.mp4``
    ...) in order."""
    numbered = [(int(m.group(1)), name) for name in sample if (m := _AUDIO_PART.match(name))]
    return [name for _, name in sorted(numbered)]


def json_turns(sample: dict) -> list:
    """The list of turns in a crude sample's ``json`` part.

    Raises:
        MissingFieldError: no ``json`` part, or none of :data:`TURN_KEYS` in it.
    """
    key = sample.get("__key__", "<unknown key>")
    meta = sample.get("json")
    if isinstance(meta, list):
        return meta
    if not isinstance(meta, dict):
        raise MissingFieldError(f"sample {key!r}: no json part (a dict with {' / '.join(TURN_KEYS)})")
    turns = next((meta[k] for k in TURN_KEYS if isinstance(meta.get(k), list)), None)
    if turns is None:
        raise MissingFieldError(
            f"sample {key!r}: the json part has no {' / '.join(TURN_KEYS)} list (keys: {sorted(meta)})"
        )
    return turns


@stateless
def cook_chatml(sample: dict, **aux: Any) -> ChatMLSample:
    """Cook a crude conversation sample into a :class:`ChatMLSample`.

    ``aux``: the auxiliary sources of the sample's metadataset entry (Energon passes each as a
    keyword argument); a sample without image parts that names its images in the json part
    (LLaVA's ``"image": "file.jpg"``) reads them from there
    (:func:`~energon_plugins.encoding.chat.aux_media.referenced_images`).

    Raises:
        MissingFieldError: no ``json`` part or no list of turns in it.
        ValueError: a turn that is neither ChatML nor GPT-style, or with an unknown role (its
            index and the sample key are named).
    """
    key = sample.get("__key__", "<unknown key>")
    turns = chat_turns(json_turns(sample), key)
    videos = video_parts(sample)
    audios = audio_parts(sample)
    images = [sample[name] for name in image_parts(sample)]
    if not images:
        from energon_plugins.encoding.chat.aux_media import referenced_images

        images = referenced_images(sample, aux)  # before basic_sample_keys: it adds the sources
    return ChatMLSample(
        **basic_sample_keys(sample),
        conversation=[{"role": role, "content": content} for role, content in turns],
        images=images,
        videos=[sample[name] for name in videos],
        video_parts=videos,
        audios=[sample[name] for name in audios],
        audio_parts=audios,
    )


def conversation_turns(sample: ChatMLSample) -> list[tuple[str, Any]]:
    """The sample's ``(role, content)`` turns.

    Raises:
        ValueError: the conversation has no assistant turn (nothing to learn from).
    """
    turns = [(turn["role"], turn["content"]) for turn in sample.conversation]
    if not any(role == "assistant" for role, _ in turns):
        raise ValueError(f"sample {sample.__key__!r}: the conversation has no assistant turn")
    return turns


def text_turns(sample: ChatMLSample) -> list[tuple[str, str]]:
    """The sample's turns for an encoder that reads text with image tags only.

    Raises:
        ValueError: no assistant turn, or a content given as typed parts (the index is named).
    """
    turns = conversation_turns(sample)
    for i, (_, content) in enumerate(turns):
        if not isinstance(content, str):
            raise ValueError(
                f"sample {sample.__key__!r}: conversation[{i}] holds typed parts; this encoder "
                "reads text turns with image tags (the hf-processor encoder reads parts)"
            )
    return turns


def conversation_cookers(*formats: str) -> list[Cooker]:
    """One :func:`cook_chatml` cooker per ``format`` subflavor (default: all of
    :data:`CONVERSATION_FORMATS`), for a task encoder's ``cookers``."""
    return [Cooker(cook_chatml, has_subflavors={"format": fmt}) for fmt in (formats or CONVERSATION_FORMATS)]


CHATML_COOKER = Cooker(cook_chatml, has_subflavors={"format": CHATML_FORMAT})
"""The cooker a task encoder lists in ``cookers`` to read crude ``chatml`` datasets."""
