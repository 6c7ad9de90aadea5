"""Megatron-LM's sample types as the samples every encoder reads, in Megatron-LM's prompt formats.

Megatron-LM's ``examples/multimodal`` task encoder reads four Energon sample types that have
no conversation of their own. :data:`MEGATRON_LM_CONVERSIONS` maps each to a function that
writes it as a :class:`~energon_plugins.encoding.chat.chatml.ChatMLSample` (a conversation
whose image tags mark the images; labels on the answers) or an ``InterleavedSample`` (running
text and images; every text token labelled); :func:`as_encodable` applies it. The
``multimodal`` and ``hf-processor`` encoders then encode the result as they encode those.

- ``OCRSample``: ``system``, ``user: <image>\\nPROMPT``, ``assistant: TEXT`` (the text without
  image tags), or, word by word, ``<ref>WORD</ref><box>(x1,y1),(x2,y2)</box>`` per word
  (``<quad>`` for 8 coordinates);
- ``MultiChoiceVQASample``: ``user: <image>\\nQUESTION\\nA. first\\nB. second\\n`` and the
  instruction line, ``assistant: B`` (the letter of ``correct_choice_idx``);
- ``SimilarityInterleavedSample``: ``texts`` of ``{"from": "human" | "gpt", "value": ...}``
  turns (Megatron-LM's SFT data) become the conversation; ``<image-N>`` tags (1-based) pick
  and order the images, one image with several tags is repeated, images without a tag are
  put first in the first user turn, tags without images are dropped from a sample that has
  none. ``texts`` of plain strings are running text with each image before the text
  ``matched_text_indices`` matches it to (all images first without them);
- ``TextSample``: running text, for text-only data blended with image data.

A sample without an image gets a blank white image first under
:attr:`~energon_plugins.encoding.chat.megatron_lm_options.MegatronLMPrompts.text_only_image`
(Megatron-LM does so when the language model is frozen).
"""

import re
from collections.abc import Callable
from typing import Any, TypeAlias

from megatron.energon import (
    InterleavedSample,
    MultiChoiceVQASample,
    OCRSample,
    SimilarityInterleavedSample,
    TextSample,
)

from energon_plugins.encoding.chat.chatml import ChatMLSample
from energon_plugins.encoding.chat.conversation import chat_turns
from energon_plugins.encoding.chat.megatron_lm_options import MegatronLMPrompts

Encodable: TypeAlias = ChatMLSample | InterleavedSample
Conversion: TypeAlias = Callable[[Any, MegatronLMPrompts, str], Encodable]

_NUMBERED_TAG = re.compile(r"<image-(\d+)>")


def blank_image(prompts: MegatronLMPrompts) -> Any:
    """The white square of :attr:`MegatronLMPrompts.blank_image_size` pixels (a PIL image)."""
    from PIL import Image

    size = prompts.blank_image_size
    return Image.new("RGB", (size, size), (255, 255, 255))


def _with_image(text: str, image_tag: str) -> str:
    """``text`` with the image tag first on its own line (Megatron-LM's place), unless it has one."""
    return text if image_tag in text else f"{image_tag}\n{text}"


def _qa(
    sample: Any, prompts: MegatronLMPrompts, question: str, answer: str, image: Any, tag: str
) -> ChatMLSample:
    turns = [("user", _with_image(question, tag)), ("assistant", answer)]
    if prompts.system_prompt:
        turns.insert(0, ("system", prompts.system_prompt))
    return ChatMLSample.derive_from(
        sample,
        conversation=[{"role": role, "content": content} for role, content in turns],
        images=[image],
    )


# ---------------------------------------------------------------------------------- OCR
def _number(value: Any) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else f"{number:g}"


def region_text(box: Any, key: str) -> str:
    """``<box>(x1,y1),(x2,y2)</box>`` of 4 (or 5, with a confidence) numbers, ``<quad>`` of 8.

    Raises:
        ValueError: another count of numbers; the sample key is named.
    """
    values = [_number(v) for v in (box.tolist() if hasattr(box, "tolist") else box)]
    if len(values) in (4, 5):
        x1, y1, x2, y2 = values[:4]
        return f"<box>({x1},{y1}),({x2},{y2})</box>"
    if len(values) in (8, 9):
        points = ",".join(f"({values[i]},{values[i + 1]})" for i in range(0, 8, 2))
        return f"<quad>{points}</quad>"
    raise ValueError(f"OCRSample {key!r}: a word box has {len(values)} numbers (expected 4, 5, 8 or 9)")


def ocr_words_answer(sample: OCRSample, image_tag: str) -> str:
    """Every word of ``sample`` as ``<ref>WORD</ref>`` and its region, in order; one flat box
    (4 or 8 numbers) is the region of the whole ``text`` (Megatron-LM reads both).

    Raises:
        ValueError: no boxes, or a different number of words and boxes; the key is named.
    """
    boxes = sample.words_boxes
    rows = boxes.tolist() if hasattr(boxes, "tolist") else list(boxes if boxes is not None else [])
    if rows and not isinstance(rows[0], (list, tuple)):
        words, rows = [sample.text], [rows]
    else:
        words = list(sample.words_text or [])
    if not words or len(words) != len(rows):
        raise ValueError(
            f"OCRSample {sample.__key__!r}: words_text has {len(words)} words and words_boxes "
            f"{len(rows)} boxes (ocr_mode words needs one box per word)"
        )
    return "".join(
        f"<ref>{str(word).replace(image_tag, '')}</ref>{region_text(box, sample.__key__)}"
        for word, box in zip(words, rows, strict=True)
    )


def ocr_sample(sample: OCRSample, prompts: MegatronLMPrompts, image_tag: str) -> ChatMLSample:
    """An ``OCRSample`` as ``user: <image>\\nPROMPT``, ``assistant: TEXT`` (or its words)."""
    boxes = sample.words_boxes
    has_words = boxes is not None and len(boxes) > 0
    if prompts.ocr_mode == "words" or (prompts.ocr_mode == "auto" and has_words):
        answer = ocr_words_answer(sample, image_tag)
        return _qa(sample, prompts, prompts.ocr_words_prompt, answer, sample.image, image_tag)
    if not isinstance(sample.text, str) or not sample.text.strip():
        raise ValueError(f"OCRSample {sample.__key__!r} has no text")
    answer = sample.text.replace(image_tag, "").strip()
    return _qa(sample, prompts, prompts.ocr_prompt, answer, sample.image, image_tag)


# ---------------------------------------------------------------------------------- multiple choice
def multichoice_question(question: str, choices: list[str], instruction: str) -> str:
    """``QUESTION\\nA. first\\nB. second\\nINSTRUCTION`` (Megatron-LM's layout)."""
    lines = "".join(f"{chr(ord('A') + i)}. {choice}\n" for i, choice in enumerate(choices))
    return f"{question}\n{lines}{instruction}"


def multichoice_sample(
    sample: MultiChoiceVQASample, prompts: MegatronLMPrompts, image_tag: str
) -> ChatMLSample:
    """A ``MultiChoiceVQASample`` as its lettered question and the letter of the right choice.

    Raises:
        ValueError: no choices, more than 26, or ``correct_choice_idx`` out of range.
    """
    choices = list(sample.choices or [])
    index = sample.correct_choice_idx
    if not choices or len(choices) > 26:
        raise ValueError(f"MultiChoiceVQASample {sample.__key__!r} has {len(choices)} choices (1 to 26)")
    if not isinstance(index, int) or not 0 <= index < len(choices):
        raise ValueError(
            f"MultiChoiceVQASample {sample.__key__!r}: correct_choice_idx {index!r} is not an index "
            f"of its {len(choices)} choices"
        )
    question = multichoice_question(
        sample.context, [str(c) for c in choices], prompts.multichoice_instruction
    )
    return _qa(sample, prompts, question, chr(ord("A") + index), sample.image, image_tag)


# ---------------------------------------------------------------------------------- interleaved
def _place_image_tags(sample: Any, turns: list[list[Any]], images: list[Any], tag: str) -> list[Any]:
    """Resolve ``<image-N>`` tags in the user turns (in place); return the images in tag order."""
    numbered: list[int] = []
    tags = 0
    for turn in turns:
        if turn[0] != "user":
            continue
        numbered += [int(n) - 1 for n in _NUMBERED_TAG.findall(turn[1])]
        turn[1] = _NUMBERED_TAG.sub(tag, turn[1])
        tags += turn[1].count(tag)
    if numbered:
        if any(not 0 <= n < len(images) for n in numbered):
            raise ValueError(
                f"SimilarityInterleavedSample {sample.__key__!r}: image tags "
                f"{sorted({n + 1 for n in numbered})} for {len(images)} image(s)"
            )
        images = [images[n] for n in numbered]
    if len(images) == 1 and tags > 1:
        images = images * tags
    if not images:
        for turn in turns:
            turn[1] = turn[1].replace(tag, "") if turn[0] == "user" else turn[1]
        return images
    if tags > len(images):
        raise ValueError(
            f"SimilarityInterleavedSample {sample.__key__!r}: {tags} image tags for {len(images)} image(s)"
        )
    if tags < len(images):
        first = next((turn for turn in turns if turn[0] == "user"), None)
        if first is None:
            raise ValueError(
                f"SimilarityInterleavedSample {sample.__key__!r} has no user turn for its images"
            )
        first[1] = tag * (len(images) - tags) + "\n" + first[1]
    return images


def similarity_interleaved_sample(
    sample: SimilarityInterleavedSample, prompts: MegatronLMPrompts, image_tag: str
) -> Encodable:
    """Turns (``{"from", "value"}`` dicts) as a conversation; plain strings as running text."""
    texts = list(sample.texts or [])
    images = list(sample.images or [])
    if not images and prompts.text_only_image:
        images = [blank_image(prompts)]
    if texts and all(isinstance(t, str) for t in texts):
        return _running_text(sample, texts, images)
    turns = [[role, content] for role, content in chat_turns(texts, str(sample.__key__))]
    for i, (role, content) in enumerate(turns):
        if not isinstance(content, str):
            raise ValueError(f"SimilarityInterleavedSample {sample.__key__!r}: texts[{i}] is not a string")
    images = _place_image_tags(sample, turns, images, image_tag)
    if prompts.system_prompt and turns[0][0] != "system":
        turns.insert(0, ["system", prompts.system_prompt])
    return ChatMLSample.derive_from(
        sample,
        conversation=[{"role": role, "content": content} for role, content in turns],
        images=images,
    )


def _running_text(
    sample: SimilarityInterleavedSample, texts: list[str], images: list[Any]
) -> InterleavedSample:
    """Each image before the text ``matched_text_indices`` names (all first without them)."""
    matched = sample.matched_text_indices
    if matched is None or len(images) > len(sample.images or []):
        matched = [0] * len(images)
    matched = [int(m) for m in matched]
    if len(matched) != len(images) or any(not 0 <= m < len(texts) for m in matched):
        raise ValueError(
            f"SimilarityInterleavedSample {sample.__key__!r}: matched_text_indices {matched} for "
            f"{len(images)} image(s) and {len(texts)} text(s)"
        )
    sequence: list[Any] = []
    for index, text in enumerate(texts):
        sequence += [image for image, m in zip(images, matched, strict=True) if m == index]
        sequence.append(text)
    return InterleavedSample.derive_from(sample, sequence=sequence)


def text_sample(sample: TextSample, prompts: MegatronLMPrompts, image_tag: str) -> InterleavedSample:
    """A ``TextSample`` as running text (a blank image first under ``text_only_image``)."""
    if not isinstance(sample.text, str):
        raise ValueError(
            f"TextSample {sample.__key__!r}: text is {type(sample.text).__name__}, expected a string"
        )
    sequence: list[Any] = [blank_image(prompts)] if prompts.text_only_image else []
    return InterleavedSample.derive_from(sample, sequence=[*sequence, sample.text])


MEGATRON_LM_CONVERSIONS: dict[type, Conversion] = {
    OCRSample: ocr_sample,
    MultiChoiceVQASample: multichoice_sample,
    SimilarityInterleavedSample: similarity_interleaved_sample,
    TextSample: text_sample,
}
"""Megatron-LM sample type -> ``conversion(sample, prompts, image_tag)``: the sample as a
``ChatMLSample`` or an ``InterleavedSample``."""

MEGATRON_LM_SAMPLE_TYPES = tuple(MEGATRON_LM_CONVERSIONS)
"""The sample types of :data:`MEGATRON_LM_CONVERSIONS`, for ``supported_sample_types``."""


def as_encodable(sample: Any, prompts: MegatronLMPrompts, image_tag: str) -> Encodable | None:
    """``sample`` written by its :data:`MEGATRON_LM_CONVERSIONS` entry; ``None`` for other types."""
    for sample_type, conversion in MEGATRON_LM_CONVERSIONS.items():
        if isinstance(sample, sample_type):
            return conversion(sample, prompts, image_tag)
    return None
