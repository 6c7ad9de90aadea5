"""Options of the built-in image processors (import-light: pydantic only)."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


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

    @model_validator(mode="after")
    def _one_source(self) -> "HFImageProcessorOptions":
        if self.path is not None and self.class_name is not None:
            raise ValueError("give either path or class_name, not both")
        return self
