"""The conversation sample the encoders read: ``ChatMLSample`` and its crude ``chatml`` cooker.

Energon has no conversation sample type, so conversations travel as crude data
(``CrudeWebdataset`` with ``subflavors: {format: chatml}``, what ``energon-plugins convert``
writes) and a task encoder cooks them with :data:`CHATML_COOKER`. A crude ``chatml`` sample
holds numbered image parts ``0.jpg``, ``1.png``, ... (any image extension Energon's decoder
knows, ordered by their number) and a ``json`` part ``{"conversations": [{"from": "human",
"value": "<image>\\n..."}, {"from": "gpt", "value": ...}, ...]}`` (GPT-style, as LLaVA and
ShareGPT store it). The cooker turns it into ChatML turns, ``{"role": "user" | "assistant" |
"system", "content": str}`` (the layout Megatron-Bridge calls ChatMLSample); the image tags in
the text mark where each image goes, in order.
"""

import re
from typing import Any

import torch
from megatron.energon import Cooker, Sample, basic_sample_keys, edataclass, stateless

from energon_plugins.encoding.task_encoders.conversation import gpt_turns

CHATML_FORMAT = "chatml"
"""The ``format`` subflavor of crude conversation datasets."""

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff")
"""Image part extensions a crude ``chatml`` sample may hold (Energon's decoder reads them all)."""

_IMAGE_PART = re.compile(rf"^(\d+)\.({'|'.join(IMAGE_EXTENSIONS)})$")


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
        images: the images as Energon decoded them (CHW tensors by default).
    """

    conversation: list[dict[str, str]]
    images: list[torch.Tensor]


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


def json_conversations(sample: dict) -> list:
    """The ``conversations`` list of a crude sample's ``json`` part.

    Raises:
        MissingFieldError: no ``json`` part, or no ``conversations`` list in it.
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
    return conversations


@stateless
def cook_chatml(sample: dict) -> ChatMLSample:
    """Cook a crude ``chatml`` sample into a :class:`ChatMLSample`.

    Raises:
        MissingFieldError: no ``json`` part or no ``conversations`` list in it.
        ValueError: a turn that is not ``{from, value}`` with a known speaker.
    """
    key = sample.get("__key__", "<unknown key>")
    conversations = json_conversations(sample)
    images = [sample[name] for name in image_parts(sample)]
    return ChatMLSample(
        **basic_sample_keys(sample), conversation=to_chatml(conversations, key), images=images
    )


def conversation_turns(sample: ChatMLSample) -> list[tuple[str, str]]:
    """The sample's ``(role, content)`` turns.

    Raises:
        ValueError: the conversation has no assistant turn (nothing to learn from).
    """
    turns = [(turn["role"], turn["content"]) for turn in sample.conversation]
    if not any(role == "assistant" for role, _ in turns):
        raise ValueError(f"sample {sample.__key__!r}: the conversation has no assistant turn")
    return turns


CHATML_COOKER = Cooker(cook_chatml, has_subflavors={"format": CHATML_FORMAT})
"""The cooker a task encoder lists in ``cookers`` to read crude ``chatml`` datasets."""
