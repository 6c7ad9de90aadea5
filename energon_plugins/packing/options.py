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

    refine_max_samples: int = Field(
        default=1000,
        ge=0,
        description=(
            "When the first pass needs more packs than ceil(total / capacity), re-pack the "
            "buffer one pack at a time, each filled as full as possible (exact subset sum), and "
            "keep that if it needs fewer packs. Runs only on buffers of at most this many "
            "samples (its cost grows with samples x packs x capacity: about 1 ms for 200 "
            "samples, 0.1 s for 1,000 at capacity 4,096); 0 turns it off."
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

    refine_max_samples: int = Field(
        default=1000,
        ge=0,
        description=(
            "When the first pass needs more packs than ceil(total / capacity), re-pack the "
            "buffer one pack at a time, each filled as full as possible (exact subset sum), and "
            "keep that if it needs fewer packs. Runs only on buffers of at most this many "
            "samples (its cost grows with samples x packs x capacity: about 1 ms for 200 "
            "samples, 0.1 s for 1,000 at capacity 4,096); 0 turns it off."
        ),
    )


class GreedyKnapsackOptions(PackingOptions):
    """Options of ``greedy-knapsack`` (the packing NeMo, Megatron-LM and LLaMA-Factory use)."""
