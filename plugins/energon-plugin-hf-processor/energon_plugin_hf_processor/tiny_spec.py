"""What it takes to build one family's tiny offline processor (and, optionally, its model).

A :class:`TinySpec` is one row of the tiny-processor table: the built-in rows are in
:mod:`.tiny`, further rows in the modules of :mod:`.tiny_families` (one module per family,
found without a list to edit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """How to build one family's tiny processor.

    Attributes:
        name: the family name (``qwen2-vl``, ...); the :class:`~.families.FamilySpec` of the
            processor it builds has the same name.
        special: special tokens in id order; ``pad``/``bos``/``eos``/``unk`` name some of them.
        build: ``build(tokenizer) -> processor``.
        model_id: the checkpoint whose template and tokens are copied.
        extra: ``extra_special_tokens`` (attribute name -> token) the processor reads from the
            tokenizer (``image_token``, ``boi_token``, ...).
        end_of_turn: the text the template puts after an answer, labelled with it (``""``
            when the answer's turn ends without a token).
        model: ``model(tokenizer) -> model``: a random transformers model of the family
            whose sizes match the tiny processor's outputs (``None``: not built in tests).
        media: what the family's processor takes (``image``, ``video``, ``audio``).
    """

    name: str
    special: tuple[str, ...]
    build: Callable[[Any], Any]
    model_id: str
    pad: str | None = None
    bos: str | None = None
    eos: str | None = None
    unk: str | None = None
    extra: dict[str, str] = dataclasses.field(default_factory=dict)
    end_of_turn: str = ""
    model: Callable[[Any], Any] | None = None
    media: tuple[str, ...] = ("image",)


QWEN2_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""The Qwen2 / Qwen2.5 tokenizers' special tokens in id order (``<|endoftext|>`` 151643 on),
which the Qwen-VL families and several others built on those tokenizers ship."""
