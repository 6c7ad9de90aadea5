"""Options of the built-in task encoders (import-light: pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from energon_plugins.encoding.chat.megatron_lm_options import MegatronLMPrompts


class MultimodalOptions(BaseModel):
    """Options of the ``multimodal`` task encoder."""

    model_config = ConfigDict(extra="forbid")

    image_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Image embeddings per image (per tile, for a processor that tiles: each "
        "image then takes its tiles times this many); None derives it from the image processor.",
    )
    patch_size: int = Field(
        default=14,
        ge=1,
        description="Vision patch size used to derive image embeddings from pixel_values "
        "(H/patch * W/patch) when the processor reports no image_grid_thw.",
    )
    merge_size: int | None = Field(
        default=None,
        ge=1,
        description="Spatial merge size for processors that report image_grid_thw "
        "(t*h*w / merge^2 embeddings); None reads the processor's merge_size, else 1.",
    )
    truncation: Literal["right", "drop", "error", "split"] = Field(
        default="right",
        description="What to do with a sample longer than seq_length: cut it (never inside an "
        "image), skip it, fail, or (with packing only) 'split' it into parts that continue in "
        "the next packs, each its own sub-sequence, never cut inside an image.",
    )
    padding: Literal["seq_length", "longest"] = Field(
        default="seq_length",
        description="Pad batches to seq_length (fixed shapes) or to the longest row.",
    )
    caption_prompt: str = Field(
        default="",
        description="The user text that precedes a caption (captioning samples); may be empty.",
    )
    on_error: Literal["skip", "raise"] = Field(
        default="skip",
        description="A sample that fails to encode is skipped and counted, or raises.",
    )
    megatron_lm: MegatronLMPrompts = Field(
        default_factory=MegatronLMPrompts,
        description="Prompts of Megatron-LM's sample types (OCRSample, MultiChoiceVQASample, "
        "SimilarityInterleavedSample, TextSample); see MegatronLMPrompts.",
    )
