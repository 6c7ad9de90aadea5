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

    # The options below are read by the task encoder's packing stage
    # (energon_plugins.encoding.task_encoders.packing), not by the strategy's selection.
    pad_to_multiple_of: int = Field(
        default=1,
        ge=1,
        description=(
            "Pad every packed sub-sequence to a multiple of this many tokens (e.g. 2 x the "
            "context-parallel size); the batch's PackedSeqParams then carries "
            "cu_seqlens_q_padded / cu_seqlens_kv_padded. seq_length must be a multiple of it."
        ),
    )
    carry_over: bool = Field(
        default=False,
        description=(
            "Hold the least-filled pack of each packing buffer back and pack its samples with "
            "the next buffer instead of emitting it part-empty (the carried samples are in the "
            "loader's saved state; at the end of a finite pass everything is emitted)."
        ),
    )
    min_fill: float = Field(
        default=0.995,
        ge=0.0,
        le=1.0,
        description=("carry_over: a pack filled below this fraction of seq_length may be carried over."),
    )
    max_carries: int = Field(
        default=8,
        ge=1,
        description=(
            "carry_over: a sample carried over this many times is emitted with its next buffer, "
            "which bounds how long a sample can wait (8 keeps fill >= 0.995 at buffer 200)."
        ),
    )
    carry_max_groups: int = Field(
        default=1,
        ge=0,
        description="carry_over: at most this many under-filled packs are carried per buffer.",
    )


class NoPackingOptions(PackingOptions):
    """Options of ``none``: every sample is its own pack."""


class _DecreasingOptions(PackingOptions):
    """Options shared by ``first-fit-decreasing`` and ``best-fit-decreasing``."""

    sort: bool = Field(
        default=True,
        description=(
            "Sort samples by length, longest first, before placing them (the 'decreasing' "
            "part). False places them in buffer order (plain first-fit or best-fit), which "
            "packs less tightly."
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


class FirstFitDecreasingOptions(_DecreasingOptions):
    """Options of ``first-fit-decreasing``."""


class BestFitDecreasingOptions(_DecreasingOptions):
    """Options of ``best-fit-decreasing``."""


class GreedyKnapsackOptions(PackingOptions):
    """Options of ``greedy-knapsack`` (the packing NeMo, Megatron-LM and LLaMA-Factory use)."""
