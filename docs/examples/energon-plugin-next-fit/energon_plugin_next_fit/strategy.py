"""The ``next-fit`` strategy: one pass over the buffer, O(n)."""

from collections.abc import Sequence

from energon_plugin_next_fit.options import NextFitOptions


class NextFit:
    """Group buffer indices in order, closing a pack when the next sample does not fit."""

    def __init__(self, options: NextFitOptions) -> None:
        self.options = options

    def select(self, lengths: Sequence[int], capacity: int) -> list[list[int]]:
        """Return groups of indices; every index exactly once, each group within ``capacity``.

        An overlong sample is alone in its group (``overlong="alone"``), the one case where a
        group's total may exceed ``capacity``: the task encoder truncates it.
        """
        limit = self.options.max_samples_per_pack
        groups: list[list[int]] = []
        current: list[int] = []
        used = 0
        for index, length in enumerate(lengths):
            if length > capacity:
                if self.options.overlong == "error":
                    raise ValueError(f"next-fit: sample {index} has length {length} > capacity {capacity}")
                groups.append([index])
                continue
            full = used + length > capacity or (limit is not None and len(current) >= limit)
            if current and full:
                groups.append(current)
                current, used = [], 0
            current.append(index)
            used += length
        if current:
            groups.append(current)
        return groups


def build_next_fit(options: NextFitOptions, context) -> NextFit:
    """Factory: ``factory(options, context) -> strategy``; ``context`` is unused here."""
    return NextFit(options)
