"""Carry-over: hold an under-filled pack back and pack its samples with the next buffer.

Packing each buffer on its own leaves the last pack of every buffer part-empty. A carry-over
stage emits the well-filled packs of a plan and keeps the samples of the worst-filled ones for
the next buffer; at the end of a finite stream it emits everything. This module holds the
pure decision; the stage that keeps carried samples (in savable state) lives in the encoder.
"""

from collections.abc import Collection, Sequence

__all__ = ["split_carry"]


def split_carry(
    groups: Sequence[Sequence[int]],
    lengths: Sequence[int],
    capacity: int,
    *,
    min_fill: float = 0.995,
    max_groups: int = 1,
    pinned: Collection[int] = (),
) -> tuple[list[list[int]], list[int]]:
    """Split packed ``groups`` into the packs to emit now and the indices to carry over.

    A group is carried when its fill (its total length, each sample counted at most
    ``capacity``, over ``capacity``) is below ``min_fill`` and it holds no ``pinned`` index
    (the caller pins samples that were already carried often enough, which bounds how long a
    sample can wait). At most ``max_groups`` groups are carried: the least filled, the later
    group first among equals.

    Returns:
        ``(emit, carried)``: the groups to emit, in their original order, and the carried
        indices, ascending. Every index of ``groups`` is in exactly one of the two.

    Raises:
        ValueError: ``capacity`` < 1, ``min_fill`` outside [0, 1] or ``max_groups`` < 0.
    """
    if capacity < 1:
        raise ValueError(f"split_carry: capacity must be >= 1, got {capacity}")
    if not 0.0 <= min_fill <= 1.0:
        raise ValueError(f"split_carry: min_fill must be within [0, 1], got {min_fill}")
    if max_groups < 0:
        raise ValueError(f"split_carry: max_groups must be >= 0, got {max_groups}")
    pinned_set = set(pinned)
    candidates = []
    for position, group in enumerate(groups):
        used = sum(min(lengths[i], capacity) for i in group)
        if used < min_fill * capacity and not pinned_set.intersection(group):
            candidates.append((used, -position))
    candidates.sort()
    chosen = {-negative for _, negative in candidates[:max_groups]}
    emit = [list(g) for p, g in enumerate(groups) if p not in chosen]
    carried = sorted(i for p in chosen for i in groups[p])
    return emit, carried
