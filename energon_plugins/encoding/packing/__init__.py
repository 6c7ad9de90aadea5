"""Sequence-packing strategies (pure Python; options in :mod:`energon_plugins.encoding.packing.options`).

Import :mod:`energon_plugins.encoding.packing.strategies` for the built-in strategies and
:class:`~energon_plugins.encoding.packing.strategies.PackingPlan`, and
:mod:`energon_plugins.encoding.packing.carry` for the carry-over decision.
"""
