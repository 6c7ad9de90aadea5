"""Options of ``resize`` (pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ResizeOptions(BaseModel):
    """Options of the ``resize`` image processor."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(default=224, ge=8, description="Output height and width in pixels.")
    mean: tuple[float, float, float] = Field(
        default=(0.48145466, 0.4578275, 0.40821073), description="Per-channel mean (CLIP's)."
    )
    std: tuple[float, float, float] = Field(
        default=(0.26862954, 0.26130258, 0.27577711), description="Per-channel std (CLIP's)."
    )

    @field_validator("std")
    @classmethod
    def _positive(cls, std: tuple[float, float, float]) -> tuple[float, float, float]:
        if min(std) <= 0:
            raise ValueError(f"every std must be > 0, got {std}")
        return std
