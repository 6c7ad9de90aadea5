"""The shape of ``blend_schedule``: stages of training-blend weights that change as a run goes.

:class:`BlendStage` is one stage (``at`` samples of the whole run, ``weights`` per top-level
blend entry); :data:`BlendSchedule` a list of them in increasing ``at``. Checked the same way in
a config file (:class:`~energon_plugins.config.DataModuleConfig`) and by the constructor
(:func:`schedule_shape_issues`); whether the stages name the blend's entries is checked against
the metadataset by :func:`~energon_plugins.config.blend_plan.schedule_issues`. Import-light:
pydantic only.
"""

from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from energon_plugins.config.settings import ConfigIssue, issue_from_pydantic
from energon_plugins.strict_types import Integer, Number


class BlendStage(BaseModel):
    """One stage of a blend schedule: from ``at`` samples on, the top-level blend entries are
    drawn with ``weights`` (entry path as the metadataset writes it -> weight)."""

    model_config = ConfigDict(extra="forbid")

    at: Integer = Field(
        ge=0,
        le=2**62,
        description="Samples the whole run (every rank and worker) has drawn from the blend when "
        "this stage begins.",
    )
    weights: dict[str, Number] = Field(
        min_length=1,
        max_length=4096,
        description="Sample weight of every top-level blend entry (its path as the metadataset "
        "YAML writes it), each > 0.",
    )

    @pydantic.field_validator("weights")
    @classmethod
    def _positive(cls, weights: dict[str, float]) -> dict[str, float]:
        bad = [f"{name}: {value!r}" for name, value in weights.items() if not 0 < value < float("inf")]
        if bad:
            raise ValueError(f"weights must be positive and finite ({', '.join(bad)})")
        return weights


def _increasing(stages: list[BlendStage]) -> list[BlendStage]:
    for before, after in zip(stages, stages[1:], strict=False):
        if after.at <= before.at:
            raise ValueError(f"stages must begin at increasing `at` ({before.at}, then {after.at})")
    return stages


BlendSchedule = Annotated[
    list[BlendStage], Field(min_length=1, max_length=4096), pydantic.AfterValidator(_increasing)
]
"""Stages in increasing order of ``at`` (at least one)."""


class _ScheduleArgument(BaseModel):
    blend_schedule: BlendSchedule | None = None


def schedule_shape_issues(value: Any) -> list[ConfigIssue]:
    """What is wrong with the shape of a ``blend_schedule`` argument (empty: nothing)."""
    try:
        _ScheduleArgument.model_validate({"blend_schedule": value})
    except pydantic.ValidationError as exc:
        return [issue_from_pydantic(error, _ScheduleArgument) for error in exc.errors()]
    return []
