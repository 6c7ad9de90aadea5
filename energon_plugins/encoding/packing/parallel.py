"""The padding that context and sequence parallelism need in packed (THD) batches.

Megatron's THD attention with context parallelism splits every sub-sequence into
``2 * CP`` chunks (load balancing), and sequence parallelism splits the token stream of each
CP rank over the TP ranks. Each packed sub-sequence is therefore padded to a multiple of
``lcm(2 * CP, CP * TP)`` (the second term only with sequence parallelism and TP > 1): the rule
Megatron-Bridge derives for its collate-time packing from the run's topology.
"""

import math


def parallel_pad_multiple(cp_size: int = 1, tp_size: int = 1, sequence_parallel: bool | None = None) -> int:
    """The multiple each packed sub-sequence must be padded to for ``cp_size`` and ``tp_size``.

    ``2 * cp_size`` when context parallelism is on (``cp_size`` > 1), combined (least common
    multiple) with ``cp_size * tp_size`` when sequence parallelism is on and ``tp_size`` > 1.
    ``sequence_parallel=None`` (unknown) counts as on: the extra padding is valid either way.

    Raises:
        ValueError: a size below 1.
    """
    if cp_size < 1 or tp_size < 1:
        raise ValueError(f"cp_size and tp_size must be >= 1, got {cp_size} and {tp_size}")
    cp_multiple = 2 * cp_size if cp_size > 1 else 1
    sp_on = True if sequence_parallel is None else bool(sequence_parallel)
    sp_multiple = cp_size * tp_size if sp_on and tp_size > 1 else 1
    return math.lcm(cp_multiple, sp_multiple)
