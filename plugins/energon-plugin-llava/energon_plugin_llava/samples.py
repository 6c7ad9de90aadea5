"""The cooked LLaVA conversation sample and the cooker of the crude ``llava`` format.

A crude ``llava`` sample (``CrudeWebdataset`` with ``subflavors: {format: llava}``) holds one
image part (``png``, ``jpg`` or ``jpeg``) and a ``json`` part
``{"conversations": [{"from": "human", "value": "<image>\\n..."}, {"from": "gpt", ...}]}``
(the LLaVA-1.5 instruction-tuning layout).
"""

from typing import Any

import torch
from megatron.energon import Sample, basic_sample_keys, edataclass, stateless

IMAGE_PARTS = ("png", "jpg", "jpeg", "image")


class MissingFieldError(KeyError):
    """A crude sample lacks a part or a JSON field the cooker needs (the message names it)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


@edataclass
class LlavaConversationSample(Sample):
    """One image and a GPT-style conversation (``from``/``value`` turns) about it."""

    image: torch.Tensor
    conversations: list[dict[str, Any]]


@stateless
def cook_llava(sample: dict) -> LlavaConversationSample:
    """Cook a crude ``llava`` sample into a :class:`LlavaConversationSample`.

    Raises:
        MissingFieldError: no image part, no ``json`` part, or no ``conversations`` list.
    """
    key = sample.get("__key__", "<unknown key>")
    image = next((sample[p] for p in IMAGE_PARTS if p in sample), None)
    if image is None:
        raise MissingFieldError(
            f"sample {key!r}: no image part ({', '.join(IMAGE_PARTS)}); parts: "
            f"{sorted(k for k in sample if not k.startswith('__'))}"
        )
    meta = sample.get("json")
    if not isinstance(meta, dict):
        raise MissingFieldError(f"sample {key!r}: no json part (a dict with 'conversations')")
    conversations = meta.get("conversations")
    if not isinstance(conversations, list):
        raise MissingFieldError(
            f"sample {key!r}: the json part has no 'conversations' list (keys: {sorted(meta)})"
        )
    return LlavaConversationSample(
        **basic_sample_keys(sample), image=image, conversations=conversations
    )
