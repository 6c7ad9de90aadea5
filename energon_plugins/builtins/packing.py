"""Registers the built-in packing strategies."""

from energon_plugins.host._markers import hookimpl

_MODULE = "energon_plugins.encoding.packing.strategies"
_OPTIONS = "energon_plugins.encoding.packing.options"


@hookimpl
def register_packing_strategies(register):
    """Register ``none``, ``first-fit-decreasing``, ``best-fit-decreasing``, ``greedy-knapsack``,
    ``vision-balanced``."""
    register(
        "none",
        f"{_MODULE}:make_none",
        options=f"{_OPTIONS}:NoPackingOptions",
        description="No packing: every sample is its own sequence",
        aliases=("no-packing",),
    )
    register(
        "first-fit-decreasing",
        f"{_MODULE}:make_first_fit_decreasing",
        options=f"{_OPTIONS}:FirstFitDecreasingOptions",
        description="Longest first, each into the first pack where it fits (segment tree)",
        aliases=("ffd",),
    )
    register(
        "best-fit-decreasing",
        f"{_MODULE}:make_best_fit_decreasing",
        options=f"{_OPTIONS}:BestFitDecreasingOptions",
        description="Longest first, each into the fullest pack where it fits (sorted list)",
        aliases=("bfd",),
    )
    register(
        "greedy-knapsack",
        f"{_MODULE}:make_greedy_knapsack",
        options=f"{_OPTIONS}:GreedyKnapsackOptions",
        description="Reference: fill one pack at a time with the longest sample that fits",
        aliases=("knapsack",),
    )
    register(
        "vision-balanced",
        "energon_plugins.encoding.packing.vision_balanced:make_vision_balanced",
        options="energon_plugins.encoding.packing.vision_balanced:VisionBalancedOptions",
        description="First-fit decreasing, then packs evened out by image/video patches (DP balance)",
    )
