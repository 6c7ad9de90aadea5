"""The cooked LLaVA conversation sample and the cooker of the crude ``llava`` format.

A crude ``llava`` sample (``CrudeWebdataset`` with ``subflavors: {format: llava}``) holds one
image part (``png``, ``jpg`` or ``jpeg``) and a ``json`` part
``{"conversations": [{"from": "human", "value": "<image>\\n..."}, {"from": "gpt", ...}]}``
(the LLaVA-1.5 instruction-tuning layout).
"""

from typing import Any

import torch
from megatron.energon import Sample, basic_sample_keys, edataclass, stateless

from energon_plugins.encoding.chatml import MissingFieldError, json_conversations

__all__ = ["IMAGE_PARTS", "LlavaConversationSample", "MissingFieldError", "cook_llava"]

IMAGE_PARTS = ("png", "jpg", "jpeg", "image")


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
    conversations = json_conversations(sample)
    return LlavaConversationSample(
        **basic_sample_keys(sample), image=image, conversations=conversations
    )
