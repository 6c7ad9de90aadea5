"""Prompts of the Megatron-LM sample types (import-light: pydantic only).

:class:`MegatronLMPrompts` is the ``megatron_lm`` option of the ``multimodal`` and
``hf-processor`` task encoders: the texts :mod:`~energon_plugins.encoding.chat.megatron_lm_samples`
writes around Energon's ``OCRSample``, ``MultiChoiceVQASample``,
``SimilarityInterleavedSample`` and ``TextSample``. The defaults are the formats of
Megatron-LM's ``examples/multimodal`` task encoder.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MULTICHOICE_INSTRUCTION = "Answer with the option's letter from the given choices directly."
"""What Megatron-LM writes after the choices of a multiple-choice question."""


class MegatronLMPrompts(BaseModel):
    """How the Megatron-LM sample types become conversations (the ``megatron_lm`` option)."""

    model_config = ConfigDict(extra="forbid")

    system_prompt: str | None = Field(
        default="Answer the questions.",
        description="The system turn of OCR, multiple-choice and conversation samples (Megatron-LM's); "
        "None leaves the system turn to the chat template.",
    )
    ocr_prompt: str = Field(
        default="Transcribe all the text you find.",
        min_length=1,
        description="The user text of an OCRSample read as plain text (the answer is its text).",
    )
    ocr_words_prompt: str = Field(
        default="Read every word in the image with its bounding box.",
        min_length=1,
        description="The user text of an OCRSample read word by word (the answer is each word as "
        "<ref>word</ref><box>(x1,y1),(x2,y2)</box>, or <quad> for 8 coordinates).",
    )
    ocr_mode: Literal["auto", "text", "words"] = Field(
        default="auto",
        description="text: answer with the sample's text; words: with its words and boxes (one "
        "flat box: the whole text's region); auto: words when the sample has words_boxes, else text.",
    )
    multichoice_instruction: str = Field(
        default=MULTICHOICE_INSTRUCTION,
        description="The line after the lettered choices of a MultiChoiceVQASample.",
    )
    text_only_image: bool = Field(
        default=False,
        description="Give samples without an image a blank white image first (what Megatron-LM "
        "does when the language model is frozen), so every sample runs the vision model.",
    )
    blank_image_size: int = Field(
        default=224,
        ge=1,
        description="Width and height in pixels of the blank image of text_only_image.",
    )
