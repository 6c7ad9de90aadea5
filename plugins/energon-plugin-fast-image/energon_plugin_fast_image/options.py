"""Options of ``fast-clip`` and ``fast-siglip`` (import-light: pydantic only).

Every setting is optional: ``None`` means "take it from ``path``'s preprocessor_config.json if
given, else the transformers default" (``CLIPImageProcessor()`` / ``SiglipImageProcessor()``).
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


def positive_std(value: list[float] | None) -> list[float] | None:
    """Validator: every std > 0 (None passes)."""
    if value is not None and any(v <= 0 for v in value):
        raise ValueError("every std must be > 0")
    return value


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

    resize_kernel: Literal["torchvision", "pillow", "torch"] = Field(
        default="torchvision",
        description="'torchvision': torch's uint8 antialiased kernel in one call, what "
        "transformers' default (torchvision) backend does (same pixels). 'pillow': Pillow's own "
        "arithmetic (its fixed-point taps, pass order and rounding; within one 0-255 level of "
        "transformers' PIL backend, several times slower). 'torch': torch's uint8 kernel in "
        "Pillow's pass order.",
    )
    jpeg_draft: bool = Field(
        default=False,
        description="Decode JPEGs at 1/2, 1/4 or 1/8 scale in the DCT domain (PIL's draft "
        "mode) while the result stays at least the resize target: faster on large photos, "
        "but the pixels differ from a full decode followed by the resize.",
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
        return positive_std(value)

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


QwenModel = Literal["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]


class FastQwen2VLOptions(BaseModel):
    """Options of ``fast-qwen2-vl``; ``None`` keeps the ``model`` preset's (or ``path``'s) value.

    The presets are transformers' ``Qwen2VLImageProcessor()`` for ``qwen2-vl`` and
    ``qwen2.5-vl`` (the same preprocessing), and the Qwen3-VL checkpoints' settings for
    ``qwen3-vl`` (16 px patches, mean = std = 0.5, 65,536-16,777,216 pixels).
    """

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        default=None,
        description="A local directory holding the checkpoint's preprocessor_config.json "
        "(read as plain JSON); its values win over the preset.",
    )
    model: QwenModel = Field(default="qwen2-vl", description="The preset: qwen2-vl, qwen2.5-vl or qwen3-vl.")
    min_pixels: int | None = Field(default=None, ge=1, description="Fewest pixels after resizing.")
    max_pixels: int | None = Field(default=None, ge=1, description="Most pixels after resizing.")
    patch_size: int | None = Field(default=None, ge=1, description="Vision patch size in pixels.")
    temporal_patch_size: int | None = Field(
        default=None, ge=1, description="Frames per temporal patch (an image is repeated)."
    )
    merge_size: int | None = Field(default=None, ge=1, description="Patches merged per side into one token.")
    image_mean: list[float] | None = Field(
        default=None, min_length=3, max_length=3, description="Per-channel mean (RGB)."
    )
    image_std: list[float] | None = Field(
        default=None, min_length=3, max_length=3, description="Per-channel std (RGB), > 0."
    )
    jpeg_draft: bool = Field(
        default=False,
        description="Decode JPEGs at 1/2, 1/4 or 1/8 scale in the DCT domain while the result "
        "stays at least the resize target (only images much larger than max_pixels gain).",
    )
    torch_threads: int | None = Field(
        default=1,
        ge=1,
        description="torch intra-op threads while a call runs (restored after); null leaves torch's setting.",
    )

    @field_validator("image_std")
    @classmethod
    def _check_std(cls, value):
        return positive_std(value)

    @model_validator(mode="after")
    def _range(self) -> "FastQwen2VLOptions":
        if self.min_pixels and self.max_pixels and self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        return self
