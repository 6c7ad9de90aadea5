"""``ConversationSample`` and the cooker of crude conversation datasets.

A crude conversation sample (a ``CrudeWebdataset`` with ``subflavors: {format: chatml}``,
``{format: llava}`` or ``{format: conversation}``) holds its images as numbered parts
(``0.png``, ``1.jpg``, ...: the ``chatml`` layout of the qwen-vl plugin) or as one ``png`` /
``jpg`` / ``jpeg`` / ``image`` part (the ``llava`` layout), its videos likewise as numbered
parts (``0.mp4``, ``1.webm``, ...) or one ``mp4`` / ``webm`` / ``mkv`` / ``mov`` / ``avi`` / ``flv`` part
(Energon hands them over as lazy ``AVDecoder`` objects), and a ``json`` part with the turns
under ``conversations``, ``messages`` or ``conversation``: GPT-style ``{"from", "value"}``
(LLaVA, ShareGPT) or ChatML ``{"role", "content"}`` turns, a content being a string with
``<image>`` / ``<video>`` tags or a list of ``{"type": "text" | "image" | "video"}`` parts.
Images and videos are each taken in the order of their part numbers, which is the order of
their tags.
"""

import dataclasses
import re
from typing import Any

from megatron.energon import Sample, basic_sample_keys, edataclass, stateless

from energon_plugins.encoding.task_encoders.conversation import chat_turns
from energon_plugins.encoding.video.decode import video_parts

FORMATS = ("chatml", "llava", "conversation")
"""The ``format`` subflavors the ``hf-processor`` encoder cooks."""

TURN_KEYS = ("conversations", "messages", "conversation")
SINGLE_IMAGE_PARTS = ("png", "jpg", "jpeg", "image")
_NUMBERED = re.compile(r"^(\d+)\.(png|jpg|jpeg)$")


class MissingFieldError(KeyError):
    """A crude sample lacks a part or a JSON field the cooker needs (the message names it)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


@edataclass
class ConversationSample(Sample):
    """A multi-turn conversation and its images and videos.

    Attributes:
        conversation: ``[(role, content), ...]`` with roles ``system``/``user``/``assistant``;
            a content is a string (image and video tags mark the media) or a list of typed parts.
        images: the images in the order of their tags (as Energon decoded them).
        videos: the videos in the order of their tags (Energon's lazy ``AVDecoder``).
        video_parts: the part name of each video (``0.mp4``), for error messages.
    """

    conversation: list[tuple[str, Any]]
    images: list[Any]
    videos: list[Any] = dataclasses.field(default_factory=list)
    video_parts: list[str] = dataclasses.field(default_factory=list)


def crude_images(sample: dict) -> list[Any]:
    """A crude sample's images: numbered parts in order, else its single image part."""
    numbered = []
    for name in sample:
        match = _NUMBERED.match(name)
        if match:
            numbered.append((int(match.group(1)), name))
    if numbered:
        return [sample[name] for _, name in sorted(numbered)]
    return [sample[name] for name in SINGLE_IMAGE_PARTS if name in sample][:1]


@stateless
def cook_conversation(sample: dict) -> ConversationSample:
    """Cook a crude conversation sample into a :class:`ConversationSample`.

    Raises:
        MissingFieldError: no ``json`` part, or none of the turn keys in it.
        ValueError: a turn that is neither ChatML nor GPT-style (its index is named).
    """
    key = sample.get("__key__", "<unknown key>")
    meta = sample.get("json")
    if isinstance(meta, list):
        turns = meta
    elif isinstance(meta, dict):
        turns = next((meta[k] for k in TURN_KEYS if k in meta), None)
        if turns is None:
            raise MissingFieldError(
                f"sample {key!r}: the json part has none of {', '.join(TURN_KEYS)} "
                f"(keys: {sorted(meta)})"
            )
    else:
        raise MissingFieldError(f"sample {key!r}: no json part holding the conversation")
    parts = video_parts(sample)
    return ConversationSample(
        **basic_sample_keys(sample),
        conversation=chat_turns(turns, key),
        images=crude_images(sample),
        videos=[sample[name] for name in parts],
        video_parts=parts,
    )
