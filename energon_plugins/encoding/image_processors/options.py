"""Options of the built-in image processors (import-light: pydantic only)."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MEGATRON_LM_TILE_DEGRADATION: dict[int, int] = {12: 8, 8: 6, 6: 4, 4: 2, 2: 1}
"""Megatron-LM's steps down in tiles per image for a sample that does not fit (maximum -> next)."""


class HFImageProcessorOptions(BaseModel):
    """Options of the ``hf`` image processor: a local directory, or a class and its arguments."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(default=None, description="A local directory with preprocessor_config.json.")
    class_name: str | None = Field(
        default=None,
        description="A transformers image-processor class (e.g. CLIPImageProcessor), used "
        "when no path is given; default CLIPImageProcessor.",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the class or for from_pretrained."
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow code from the model directory to run. Off by default."
    )
    degrade_tiles: bool = Field(
        default=False,
        description="For a processor that tiles (InternVL's GotOcr2ImageProcessor with "
        "crop_to_patches): a sample that does not fit seq_length is processed again with fewer "
        "tiles per image, stepping the maximum down along tile_degradation, before it is cut or "
        "skipped (Megatron-LM's rule).",
    )
    tile_degradation: dict[int, int] = Field(
        default_factory=lambda: dict(MEGATRON_LM_TILE_DEGRADATION),
        description="Maximum tiles per image -> the maximum to try next (Megatron-LM's "
        "{12: 8, 8: 6, 6: 4, 4: 2, 2: 1} by default); the processor's own maximum must be a key.",
    )

    @field_validator("tile_degradation")
    @classmethod
    def _steps_down(cls, steps: dict[int, int]) -> dict[int, int]:
        for high, low in steps.items():
            if high > 1 and not 1 <= low < high:
                raise ValueError(f"{high}: {low} does not step down (each value is from 1 to below its key)")
        return steps

    @model_validator(mode="after")
    def _one_source(self) -> "HFImageProcessorOptions":
        if self.path is not None and self.class_name is not None:
            raise ValueError("give either path or class_name, not both")
        return self
