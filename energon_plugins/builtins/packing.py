"""Registers the built-in packing strategies."""

from energon_plugins._markers import hookimpl


@hookimpl
def register_packing_strategies(register):
    """Register ``none``, ``first-fit-decreasing``, ``best-fit-decreasing``, ``greedy-knapsack``."""
    # Filled in by the packing module (issue: packing strategies).
