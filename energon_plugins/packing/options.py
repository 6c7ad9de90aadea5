"""Options of the built-in packing strategies (import-light: pydantic only).

The CLI lists and validates configurations through these models without importing the
strategies themselves.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Overlong = Literal["truncate", "drop", "error"]
"""What a strategy does with a sample longer than the pack capacity."""


class PackingOptions(BaseModel):
    """Options every built-in packing strategy accepts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    overlong: Overlong = Field(
        default="truncate",
        description=(
            "A sample longer than the capacity: 'truncate' puts it alone in its own pack (the "
            "encoder cuts it to the capacity), 'drop' leaves it out (reported in the plan), "
            "'error' raises a ValueError naming the sample's index and length."
        ),
    )


class NoPackingOptions(PackingOptions):
    """Options of ``none``: every sample is its own pack."""


class FirstFitDecreasingOptions(PackingOptions):
    """Options of ``first-fit-decreasing``."""

    sort: bool = Field(
        default=True,
        description=(
            "Sort samples by length, longest first, before placing them (first-fit decreasing). "
            "False places them in buffer order (plain first-fit), which packs less tightly."
        ),
    )


class BestFitDecreasingOptions(PackingOptions):
    """Options of ``best-fit-decreasing``."""

    sort: bool = Field(
        default=True,
        description=(
            "Sort samples by length, longest first, before placing them (best-fit decreasing). "
            "False places them in buffer order (plain best-fit), which packs less tightly."
        ),
    )


class GreedyKnapsackOptions(PackingOptions):
    """Options of ``greedy-knapsack`` (the packing NeMo, Megatron-LM and LLaMA-Factory use)."""
