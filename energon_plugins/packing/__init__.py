"""Sequence-packing strategies (pure Python; options in :mod:`energon_plugins.packing.options`).

Import :mod:`energon_plugins.packing.strategies` for the built-in strategies and
:class:`~energon_plugins.packing.strategies.PackingPlan`, and
:mod:`energon_plugins.packing.carry` for the carry-over decision.
"""
