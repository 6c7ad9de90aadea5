"""Options of the ``qwen2-vl`` task encoder and image processor (pydantic only)."""

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from energon_plugins import VideoOptions

# transformers' Qwen2-VL defaults: 56*56 and 28*28*1280 pixels.
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 1280


class Qwen2VLOptions(BaseModel):
    """Options of the ``qwen2-vl`` task encoder."""

    model_config = ConfigDict(extra="forbid")

    # Read by the core's multimodal encoder, fixed for Qwen2-VL: tokens come from the grid.
    image_tokens: ClassVar[None] = None
    patch_size: ClassVar[int] = 14

    system_prompt: str | None = Field(
        default=None,
        description="A system prompt put before the first turn; None leaves it to the chat "
        "template (Qwen2's adds 'You are a helpful assistant.'). A conversation that starts "
        "with a system turn keeps its own.",
    )
    merge_size: int | None = Field(
        default=None,
        ge=1,
        description="Spatial merge size (t*h*w / merge^2 tokens per image); None reads the "
        "image processor's merge_size.",
    )
    vision_start_token: str = Field(
        default="<|vision_start|>",
        min_length=1,
        description="The token that opens each image's run of image_pad tokens.",
    )
    image_pad_token: str = Field(
        default="<|image_pad|>",
        min_length=1,
        description="The token repeated once per merged patch of an image.",
    )
    vision_end_token: str = Field(
        default="<|vision_end|>",
        min_length=1,
        description="The token that closes each image's run of image_pad tokens.",
    )
    video_pad_token: str = Field(
        default="<|video_pad|>",
        min_length=1,
        description="The token repeated once per merged patch of a video (between "
        "vision_start and vision_end, in place of each video tag).",
    )
    video: VideoOptions = Field(
        default_factory=VideoOptions,
        description="How videos are sampled (num_frames or fps, min/max frames), sized "
        "(min/max_pixels per frame, transformers' Qwen2VLVideoProcessor) and budgeted "
        "(max_visual_tokens: fewer frames, then lower resolution, before a skip).",
    )
    caption_prompt: str = Field(
        default="Describe this image.",
        description="The user text of a captioning sample (the caption is the answer).",
    )
    truncation: Literal["right", "drop", "error"] = Field(
        default="right",
        description="A sample longer than seq_length: cut it (never inside an image), skip "
        "it, or fail. A sample with videos is never cut: it gives up frames and resolution "
        "(video options), else it is skipped (too_long).",
    )
    padding: Literal["seq_length", "longest"] = Field(
        default="seq_length",
        description="Pad batches to seq_length (fixed shapes) or to the longest row.",
    )
    on_error: Literal["skip", "raise"] = Field(
        default="skip",
        description="A sample that fails to cook or encode is skipped and counted, or raises.",
    )


class Qwen2VLImageProcessorOptions(BaseModel):
    """Options of the ``qwen2-vl`` image processor (transformers' ``Qwen2VLImageProcessor``)."""

    model_config = ConfigDict(extra="forbid")

    min_pixels: int = Field(
        default=DEFAULT_MIN_PIXELS,
        ge=1,
        description="Images smaller than this (H*W) are scaled up to it (multiples of 28 px).",
    )
    max_pixels: int = Field(
        default=DEFAULT_MAX_PIXELS,
        ge=1,
        description="Images larger than this (H*W) are scaled down to it.",
    )
    patch_size: int = Field(default=14, ge=1, description="Vision patch size in pixels.")
    temporal_patch_size: int = Field(default=2, ge=1, description="Frames per temporal patch.")
    merge_size: int = Field(default=2, ge=1, description="Patches merged per side into one token.")

    @model_validator(mode="after")
    def _range(self) -> "Qwen2VLImageProcessorOptions":
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        return self
