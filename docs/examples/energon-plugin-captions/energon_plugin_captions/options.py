"""Options of ``captions`` (pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CaptionOptions(BaseModel):
    """Options of the ``captions`` task encoder."""

    model_config = ConfigDict(extra="forbid")

    image_tokens: int = Field(default=16, ge=1, description="Image-token positions per image.")
    prompt: str = Field(default="", description="Text placed between the image and the caption.")
    on_error: Literal["skip", "raise"] = Field(
        default="skip", description="A sample that fails to encode is skipped and counted, or raises."
    )
