"""Sequence-packing strategies."""
