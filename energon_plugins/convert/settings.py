"""The settings of one conversion, validated once for the command line and the Python API."""

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from energon_plugins.convert.splits import parse_split_ratio

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
MIN_SHARD_BYTES = 16 * 1024


def parse_size(value: Any) -> int:
    """``"256MB"``, ``"1GiB"``, ``"500k"`` or an int -> bytes."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    match = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", str(value))
    unit = (match.group(2).upper() if match else "")
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
    shard_size: int = Field(default=256 * 10**6, ge=MIN_SHARD_BYTES,
                            description="Largest shard in bytes ('256MB', '1GiB' accepted).")
    image_token: str = Field(default="<image>", min_length=1,
                             description="The image placeholder in the text (sample_config.image_token).")
    reencode: Literal["png", "jpeg"] | None = Field(
        default=None, description="Re-encode every image (default: keep the original bytes).")
    workers: int = Field(default_factory=default_workers, ge=0,
                         description="Worker processes that load and check records (0: none).")
    strict: bool = Field(default=False, description="Fail on the first bad record.")
    checkpoint_every: int = Field(default=2000, ge=1,
                                  description="Records between two resume checkpoints.")

    @field_validator("split_ratio", mode="before")
    @classmethod
    def _ratio(cls, value: Any) -> Any:
        return parse_split_ratio(value)

    @field_validator("shard_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return parse_size(value)

    def output_settings(self) -> dict[str, Any]:
        """The settings that shape the output (a resumed run must use the same)."""
        data = self.model_dump(exclude={"workers", "strict", "checkpoint_every"})
        data["split_ratio"] = [list(pair) for pair in self.split_ratio]
        return data
