"""Options of the built-in task encoders (import-light: pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MultimodalOptions(BaseModel):
    """Options of the ``multimodal`` task encoder."""

    model_config = ConfigDict(extra="forbid")

    image_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Image embeddings per image; None derives it from the image processor.",
    )
    truncation: Literal["right", "drop", "error"] = Field(
        default="right",
        description="What to do with a sample longer than seq_length: cut it, skip it, or fail.",
    )
    on_error: Literal["skip", "raise"] = Field(
        default="skip",
        description="A sample that fails to encode is skipped and counted, or raises.",
    )
