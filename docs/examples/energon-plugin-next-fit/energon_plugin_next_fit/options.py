"""Options of ``next-fit`` (pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class NextFitOptions(BaseModel):
    """Options of the ``next-fit`` packing strategy."""

    model_config = ConfigDict(extra="forbid")

    max_samples_per_pack: int | None = Field(
        default=None, ge=1, description="At most this many samples in one pack; None: no limit."
    )
    overlong: Literal["alone", "error"] = Field(
        default="alone",
        description="A sample longer than the capacity: put it alone in its own pack (the "
        "encoder truncates it) or raise.",
    )
