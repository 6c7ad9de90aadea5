"""``ChatMLSample`` (role/content turns plus images and videos) and the cooker of the crude
``chatml`` format.

A crude ``chatml`` sample (``CrudeWebdataset`` with ``subflavors: {format: chatml}``) holds
image parts ``0.png``, ``1.png``, ... (``jpg``/``jpeg`` too, ordered by their number), video
parts ``0.mp4``, ``1.webm``, ... (or one ``mp4`` / ``webm`` / ... part; ``<video>`` tags place
them) and a
``json`` part ``{"conversations": [{"from": "human", "value": "<image>\\n<image>\\n..."},
{"from": "gpt", "value": ...}, ...]}`` (GPT-style, as LLaVA and ShareGPT store it). The cooker
turns it into ChatML turns, ``{"role": "user" | "assistant" | "system", "content": str}``
(the layout Megatron-Bridge calls ChatMLSample).
"""

import dataclasses
import re
from typing import Any

import torch
from megatron.energon import Sample, basic_sample_keys, edataclass, stateless

from energon_plugins.encoding.task_encoders.conversation import gpt_turns
from energon_plugins.encoding.video.decode import video_parts

_IMAGE_PART = re.compile(r"^(\d+)\.(png|jpg|jpeg)$")


class MissingFieldError(KeyError):
    """A crude sample lacks a part or a JSON field the cooker needs (the message names it)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


@edataclass
class ChatMLSample(Sample):
    """A multi-turn ChatML conversation and its images, in the order their tags appear.

    Attributes:
        conversation: ``[{"role": ..., "content": ...}, ...]``; image tags (``<image>``) in
            the content mark where each image goes.
        images: CHW image tensors as Energon decoded them.
        videos: the videos in the order of their tags (Energon's lazy ``AVDecoder``).
        video_parts: the part name of each video (``0.mp4``), for error messages.
    """

    conversation: list[dict[str, str]]
    images: list[torch.Tensor]
    videos: list[Any] = dataclasses.field(default_factory=list)
    video_parts: list[str] = dataclasses.field(default_factory=list)


def image_parts(sample: dict) -> list[str]:
    """The names of a crude sample's numbered image parts (``0.png``, ``1.jpg``, ...), in order."""
    found = []
    for name in sample:
        match = _IMAGE_PART.match(name)
        if match:
            found.append((int(match.group(1)), name))
    return [name for _, name in sorted(found)]


def to_chatml(conversations: Any, key: str) -> list[dict[str, str]]:
    """GPT-style ``from``/``value`` turns -> ChatML ``role``/``content`` turns.

    Raises:
        ValueError: a turn's ``from`` is unknown or its ``value`` is not a string (the index
            of the turn and the sample key are named).
    """
    return [{"role": role, "content": text} for role, text in gpt_turns(conversations, key)]


@stateless
def cook_chatml(sample: dict) -> ChatMLSample:
    """Cook a crude ``chatml`` sample into a :class:`ChatMLSample`.

    Raises:
        MissingFieldError: no ``json`` part or no ``conversations`` list in it.
        ValueError: a turn that is not ``{from, value}`` with a known speaker.
    """
    key = sample.get("__key__", "<unknown key>")
    meta = sample.get("json")
    if not isinstance(meta, dict):
        raise MissingFieldError(f"sample {key!r}: no json part (a dict with 'conversations')")
    conversations = meta.get("conversations")
    if not isinstance(conversations, list):
        raise MissingFieldError(
            f"sample {key!r}: the json part has no 'conversations' list (keys: {sorted(meta)})"
        )
    images = [sample[name] for name in image_parts(sample)]
    videos = video_parts(sample)
    return ChatMLSample(
        **basic_sample_keys(sample), conversation=to_chatml(conversations, key), images=images,
        videos=[sample[name] for name in videos], video_parts=videos,
    )
