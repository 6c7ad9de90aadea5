"""Tests of the next-fit strategy through the registry, as a user would select it."""

import pytest
from energon_plugin_next_fit import plugin
from hypothesis import given, settings
from hypothesis import strategies as st

import energon_plugins


@pytest.fixture
def registry():
    """A registry with the built-ins and this module, in use for the test only."""
    with energon_plugins.isolated_registry(plugin, entry_points=False) as reg:
        yield reg


def test_registered_with_alias(registry):
    assert registry.resolve("packing_strategy", "nf").name == "next-fit"


def test_unknown_option_is_rejected(registry):
    with pytest.raises(energon_plugins.PluginOptionsError, match="max_samples_per_pak"):
        energon_plugins.create("packing_strategy", "next-fit", {"max_samples_per_pak": 2})


@settings(deadline=None)  # a busy CI machine can take over 200 ms for one example
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=120), max_size=60),
    limit=st.none() | st.integers(min_value=1, max_value=5),
)
def test_every_index_once_and_within_capacity(lengths, limit):
    with energon_plugins.isolated_registry(plugin, entry_points=False):
        strategy = energon_plugins.create("packing_strategy", "next-fit", {"max_samples_per_pack": limit})
    groups = strategy.select(lengths, 100)
    flat = [i for group in groups for i in group]
    assert sorted(flat) == list(range(len(lengths)))
    for group in groups:
        assert len(group) == 1 or sum(lengths[i] for i in group) <= 100
        assert limit is None or len(group) <= limit
