"""Options of ``plain-torch`` (pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field


class PlainTorchOptions(BaseModel):
    """Options of the ``plain-torch`` batch format."""

    model_config = ConfigDict(extra="forbid")

    ignore_index: int = Field(
        default=-100,
        description="The label written where the loss is off (your cross_entropy's ignore_index).",
    )
    images: bool = Field(default=True, description="Pass pixel_values through (False: drop them).")
