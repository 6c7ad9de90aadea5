"""The settings of one conversion, validated once for the command line and the Python API."""

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from energon_plugins.convert.formats.media import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_IMAGE_SIZE,
    MediaLimits,
)
from energon_plugins.convert.report import parse_reject_limit
from energon_plugins.convert.splits import parse_split_ratio

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
MIN_SHARD_BYTES = 16 * 1024


def parse_size(value: Any) -> int:
    """``"256MB"``, ``"1GiB"``, ``"500k"`` or an int -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    match = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", str(value))
    unit = match.group(2).upper() if match else ""
    unit = unit + "B" if unit in ("K", "M", "G", "T") else unit
    if not match or unit not in _UNITS:
        raise ValueError(f"not a size: {value!r} (e.g. 256MB, 1GiB, 500000)")
    return int(float(match.group(1)) * _UNITS[unit])


def default_workers() -> int:
    """One worker per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class ConvertSettings(BaseModel):
    """What ``energon-plugins convert`` (and :func:`energon_plugins.convert_dataset`) takes."""

    model_config = ConfigDict(extra="forbid")

    source_format: str = Field(description="The source format's name (--from).")
    options: dict[str, Any] = Field(default_factory=dict, description="The source format's options.")
    split_ratio: list[tuple[str, float]] = Field(
        default=[("train", 0.95), ("val", 0.05)],
        description="Split shares: 'train=0.9,val=0.05,test=0.05', '0.9,0.05,0.05' or pairs.",
    )
    shard_size: int = Field(
        default=256 * 10**6,
        ge=MIN_SHARD_BYTES,
        description="Largest shard in bytes ('256MB', '1GiB' accepted).",
    )
    image_token: str = Field(
        default="<image>",
        min_length=1,
        description="The image placeholder in the text (sample_config.image_token).",
    )
    audio_token: str = Field(
        default="<audio>",
        min_length=1,
        description="The audio placeholder in the text (the hf-processor encoder's audio.tag).",
    )
    reencode: Literal["png", "jpeg"] | None = Field(
        default=None, description="Re-encode every image (default: keep the original bytes)."
    )
    max_image_size: int = Field(
        default=DEFAULT_MAX_IMAGE_SIZE,
        ge=1,
        description="Largest image file or embedded image in bytes ('64MiB' accepted); a larger "
        "one is rejected (too_large) without being read.",
    )
    max_image_pixels: int = Field(
        default=DEFAULT_MAX_IMAGE_PIXELS,
        ge=1,
        description="Most pixels an image header may declare ('64M' accepted); more is "
        "rejected (too_many_pixels) before decoding.",
    )
    allow_outside: list[str] = Field(
        default_factory=list,
        description="Folders images may also be read from besides the media folder (for "
        "absolute paths); symlinks are resolved, and a path must lie inside one of them.",
    )
    workers: int = Field(
        default_factory=default_workers,
        ge=0,
        description="Worker processes that load and check records (0: none).",
    )
    strict: bool = Field(default=False, description="Fail on the first bad record.")
    max_rejected: str | None = Field(
        default=None,
        description="Fail (before the index, resumable) when more records are rejected: a "
        "share of those read ('10%', the command line's default; '100%': never) or a number "
        "('500'); None: no limit.",
    )
    checkpoint_every: int = Field(default=2000, ge=1, description="Records between two resume checkpoints.")

    @field_validator("split_ratio", mode="before")
    @classmethod
    def _ratio(cls, value: Any) -> Any:
        return parse_split_ratio(value)

    @field_validator("max_rejected", mode="before")
    @classmethod
    def _max_rejected(cls, value: Any) -> Any:
        limit = parse_reject_limit(value)
        return None if limit is None else str(limit)

    @field_validator("shard_size", "max_image_size", "max_image_pixels", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return parse_size(value)

    @field_validator("allow_outside", mode="before")
    @classmethod
    def _roots(cls, value: Any) -> Any:
        roots = [value] if isinstance(value, (str, os.PathLike)) else list(value or ())
        resolved = []
        for root in roots:
            path = os.path.realpath(os.path.expanduser(os.fspath(root)))
            if not os.path.isdir(path):
                raise ValueError(f"{root}: not a folder")
            resolved.append(path)
        return resolved

    @field_validator("audio_token")
    @classmethod
    def _distinct_tokens(cls, value: str, info: ValidationInfo) -> str:
        if value == info.data.get("image_token"):
            raise ValueError(f"the audio and image placeholders must differ (image_token is also {value!r})")
        return value

    def media_limits(self) -> MediaLimits:
        """The limits a record's media are read under (see :mod:`energon_plugins.convert.formats.media`)."""
        return MediaLimits(
            max_image_size=self.max_image_size,
            max_image_pixels=self.max_image_pixels,
            allowed_roots=tuple(self.allow_outside),
        )

    def output_settings(self) -> dict[str, Any]:
        """The settings that shape the output (a resumed run must use the same)."""
        data = self.model_dump(exclude={"workers", "strict", "checkpoint_every", "max_rejected"})
        data["split_ratio"] = [list(pair) for pair in self.split_ratio]
        for key in ("max_image_size", "max_image_pixels", "allow_outside", "audio_token"):  # newer settings:
            if data[key] == type(self).model_fields[key].get_default(call_default_factory=True):
                del data[key]  # left out at their defaults, so an older run still resumes
        return data
