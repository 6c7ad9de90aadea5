"""The packing contract as a predicate over one selection (no torch, no Energon).

:func:`selection_problem` is what the loader checks every packing buffer with
(:mod:`energon_plugins.encoding.task_encoders.packing_selection`) and what the plugin author's
kit checks a strategy with over many buffers (:func:`energon_plugins.testing.
check_packing_strategy`); :mod:`energon_plugins.encoding.plugin_outputs` gathers it with the
predicates of the other kinds.
"""

import operator
from collections.abc import Sequence
from typing import Any

Problem = tuple[str, str] | None
"""``None``, or ``(rule, detail)``: the rule's short name (as the kit names it) and what is
wrong."""


def selection_problem(
    groups: Any, lengths: Sequence[int], capacity: int, *, complete: bool = True
) -> Problem:
    """Whether ``groups`` (what ``select(lengths, capacity)`` returned) keeps the packing
    contract: a list of non-empty lists of integer indices into the buffer (rule
    ``select-output``), each index at most once (``packing-unique``), every group of several
    samples within ``capacity`` (``packing-capacity``) and, with ``complete``, every sample that
    fits placed (``packing-complete``)."""
    if not isinstance(groups, (list, tuple)):
        return "select-output", f"select returned {type(groups).__name__}, not a list of lists"
    seen: set[int] = set()
    for number, group in enumerate(groups):
        if not isinstance(group, (list, tuple)):
            return "select-output", f"group {number} is {type(group).__name__}, not a list"
        if not group:
            return "select-output", f"group {number} is empty"
        indices = []
        for item in group:
            try:
                index = operator.index(item)
            except TypeError:
                return "select-output", f"group {number} holds {item!r}, not an integer index"
            if not 0 <= index < len(lengths):
                return "select-output", f"group {number} holds index {index}, outside the buffer"
            if index in seen:
                return "packing-unique", f"index {index} is placed more than once"
            seen.add(index)
            indices.append(index)
        total = sum(lengths[i] for i in indices)
        if len(indices) > 1 and total > capacity:
            return "packing-capacity", f"group {number} {indices} holds {total} tokens > capacity {capacity}"
    if complete:
        missing = [i for i, length in enumerate(lengths) if length <= capacity and i not in seen]
        if missing:
            return "packing-complete", (
                f"samples {missing[:10]} fit the capacity but are in no group (Energon discards them)"
            )
    return None
