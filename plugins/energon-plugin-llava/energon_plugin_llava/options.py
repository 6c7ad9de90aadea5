"""Options of the ``llava`` task encoder and the ``llava-clip`` image processor (pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from energon_plugin_llava.template import LLAVA_SYSTEM_PROMPT
from energon_plugins import MultimodalOptions

DEFAULT_CAPTION_PROMPT = "Provide a brief description of the given image."


class LlavaOptions(MultimodalOptions):
    """Options of the ``llava`` task encoder.

    Adds the LLaVA-1.5 conversation settings to the built-in encoder's options
    (``patch_size``, ``image_tokens``, ``truncation``, ``padding``, ``on_error``, ...).
    """

    model_config = ConfigDict(extra="forbid")

    chat_template: Literal["llava-1.5", "tokenizer"] = Field(
        default="llava-1.5",
        description="Render turns in the LLaVA-1.5 (Vicuna v1) format, or with the tokenizer's "
        "own chat template.",
    )
    system_prompt: str | None = Field(
        default=LLAVA_SYSTEM_PROMPT,
        description="The system prompt put before the first turn (None or '': none); a "
        "conversation that starts with a system turn keeps its own.",
    )
    image_position: Literal["before", "after"] = Field(
        default="before",
        description="Where the image tag goes in a VQA/captioning prompt that has none "
        "(LLaVA puts '<image>\\n' before the question).",
    )
    caption_prompt: str = Field(
        default=DEFAULT_CAPTION_PROMPT,
        description="The user text of a captioning sample (the caption is the answer).",
    )
    patch_size: int = Field(
        default=14,
        ge=1,
        description="Vision patch size: an image becomes (crop_size / patch_size)^2 image "
        "tokens (576 for 336 px crops and 14 px patches).",
    )


class LlavaClipOptions(BaseModel):
    """Options of the ``llava-clip`` image processor (LLaVA-1.5's CLIP ViT-L/14-336 settings)."""

    model_config = ConfigDict(extra="forbid")

    image_size: int = Field(
        default=336, ge=1, description="Shortest edge after resizing and the square crop size."
    )
    image_aspect_ratio: Literal["pad", "crop"] = Field(
        default="pad",
        description="'pad': pad the image to a square with the mean colour first (LLaVA-1.5), "
        "'crop': plain CLIP resize + center crop.",
    )
