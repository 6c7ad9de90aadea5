"""The one builder of megatron-core ``PackedSeqParams`` for packed rows.

Every packed batch, whatever built it (the base task encoder's collate or the packing
stage's), describes its sub-sequences the same way: ``qkv_format="thd"`` over the flattened
``B * L`` tokens, each row's padding tail as a segment of its own.
"""

from typing import Any


def packed_seq_params(
    real_segments: list[int], padded_segments: list[int] | None = None, always_padded: bool = False
) -> Any:
    """megatron-core ``PackedSeqParams(qkv_format="thd")`` for rows laid end to end.

    Args:
        real_segments: every sub-sequence of every row in order, without the padding a
            sub-sequence may carry (for context parallelism); each row's padding tail is a
            segment of its own, so the cumulative lengths cover every token.
        padded_segments: the same segments as laid out, padding included (default: equal to
            ``real_segments``).
        always_padded: set the ``*_padded`` fields even when the two lists are equal.

    ``cu_seqlens_*_padded`` are set when the two differ (or ``always_padded``);
    ``max_seqlen_*`` is the longest laid-out segment.
    """
    import torch

    from energon_plugins._quiet import import_quietly

    PackedSeqParams = import_quietly("megatron.core.packed_seq_params").PackedSeqParams
    if padded_segments is None:
        padded_segments = real_segments

    def cumulative(lengths: list[int]) -> Any:
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), dim=0)
        return cu

    cu_real = cumulative(real_segments)
    padded = always_padded or list(real_segments) != list(padded_segments)
    cu_padded = cumulative(padded_segments) if padded else None
    longest = max(padded_segments, default=0)
    return PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu_real,
        cu_seqlens_kv=cu_real.clone(),
        cu_seqlens_q_padded=cu_padded,
        cu_seqlens_kv_padded=cu_padded.clone() if cu_padded is not None else None,
        max_seqlen_q=longest,
        max_seqlen_kv=longest,
    )
