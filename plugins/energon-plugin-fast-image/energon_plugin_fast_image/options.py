"""Options of ``fast-clip`` and ``fast-siglip`` (import-light: pydantic only).

Every setting is optional: ``None`` means "take it from ``path``'s preprocessor_config.json if
given, else the transformers default" (``CLIPImageProcessor()`` / ``SiglipImageProcessor()``).
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ResampleName = Literal["bicubic", "bilinear", "nearest"]

# PIL's resampling codes, as transformers stores them in preprocessor_config.json.
PIL_RESAMPLE_CODES: dict[int, ResampleName] = {0: "nearest", 2: "bilinear", 3: "bicubic"}
PIL_UNSUPPORTED_CODES = {1: "lanczos", 4: "box", 5: "hamming"}


def resample_name(value: int | str, where: str = "resample") -> ResampleName:
    """Map a PIL code (3) or a name ("bicubic") to a supported resample name.

    Raises:
        ValueError: naming ``where`` and the supported values.
    """
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a PIL code or a name, got {value!r}")
    if isinstance(value, int):
        if value in PIL_RESAMPLE_CODES:
            return PIL_RESAMPLE_CODES[value]
        label = PIL_UNSUPPORTED_CODES.get(value, "unknown")
        raise ValueError(
            f"{where}: PIL resample code {value} ({label}) is not supported; "
            "use 3 (bicubic), 2 (bilinear) or 0 (nearest)"
        )
    if isinstance(value, str) and value.lower() in PIL_RESAMPLE_CODES.values():
        return value.lower()  # type: ignore[return-value]
    raise ValueError(f"{where}: expected 'bicubic', 'bilinear', 'nearest' or 3/2/0, got {value!r}")


class _FastImageOptions(BaseModel):
    """Settings shared by both processors; ``None`` keeps the file's value or the default."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        description="A local directory holding preprocessor_config.json (read as plain JSON).",
    )
    size: dict[str, int] | int | None = Field(
        default=None,
        description="Resize target: {shortest_edge: N} or {height: H, width: W} (an int means "
        "shortest_edge for CLIP, a square for SigLIP).",
    )
    crop_size: dict[str, int] | int | None = Field(
        default=None, description="Center-crop size {height: H, width: W} (an int: a square)."
    )
    do_resize: bool | None = Field(default=None, description="Resize the images.")
    do_center_crop: bool | None = Field(default=None, description="Center-crop after resizing.")
    do_rescale: bool | None = Field(default=None, description="Multiply by rescale_factor.")
    rescale_factor: float | None = Field(
        default=None, gt=0, description="Scale applied to 0-255 pixel values (default 1/255)."
    )
    do_normalize: bool | None = Field(default=None, description="Subtract mean, divide by std.")
    image_mean: list[float] | None = Field(
        default=None, min_length=3, max_length=3, description="Per-channel mean (RGB)."
    )
    image_std: list[float] | None = Field(
        default=None, min_length=3, max_length=3, description="Per-channel std (RGB), > 0."
    )
    resample: int | ResampleName | None = Field(
        default=None,
        description="Resampling filter: 'bicubic' (PIL code 3), 'bilinear' (2) or 'nearest' (0).",
    )

    resize_kernel: Literal["pillow", "torch"] = Field(
        default="pillow",
        description="'pillow': Pillow's own arithmetic (its fixed-point taps, pass order and "
        "rounding; within one 0-255 level of transformers' PIL path). 'torch': torch's uint8 "
        "antialiased kernel in Pillow's pass order (about 2x faster; a rare pixel 2 levels off, "
        "0.03 after CLIP's normalization).",
    )
    torch_threads: int | None = Field(
        default=1,
        ge=1,
        description="torch intra-op threads while a call runs (restored after); null leaves "
        "torch's setting. Default 1: the resize's many small matrix products stall in torch's "
        "thread pool when other processes share the cores (measured 10-25x slower with 2).",
    )

    @field_validator("size", "crop_size")
    @classmethod
    def _check_size(cls, value):
        if value is None:
            return value
        if isinstance(value, int):
            if value < 1:
                raise ValueError("must be a positive integer")
            return value
        keys = set(value)
        if keys not in ({"shortest_edge"}, {"height", "width"}):
            raise ValueError(
                f"expected {{shortest_edge: N}} or {{height: H, width: W}}, got keys {sorted(keys)}"
            )
        if any(v < 1 for v in value.values()):
            raise ValueError("sizes must be positive integers")
        return value

    @field_validator("image_std")
    @classmethod
    def _check_std(cls, value):
        if value is not None and any(v <= 0 for v in value):
            raise ValueError("every std must be > 0")
        return value

    @field_validator("resample")
    @classmethod
    def _check_resample(cls, value):
        if value is None:
            return value
        return resample_name(value, "resample")


class FastCLIPOptions(_FastImageOptions):
    """Options of ``fast-clip``; defaults are those of transformers' ``CLIPImageProcessor()``."""


class FastSiglipOptions(_FastImageOptions):
    """Options of ``fast-siglip``; defaults are those of ``SiglipImageProcessor()``."""
