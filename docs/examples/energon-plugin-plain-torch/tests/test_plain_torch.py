"""Tests of the plain-torch format through the registry, as a user would select it."""

import pytest
import torch
from energon_plugin_plain_torch import plugin

import energon_plugins
from energon_plugins.testing.batch_format import next_token_examples, sample_batches, truth


@pytest.fixture
def registry():
    """A registry with the built-ins and this module, in use for the test only."""
    with energon_plugins.isolated_registry(plugin, entry_points=False) as reg:
        yield reg


def test_registered_and_options_checked(registry):
    assert registry.resolve("batch_format", "plain-torch").options.__name__ == "PlainTorchOptions"
    with pytest.raises(energon_plugins.PluginOptionsError, match="ignore_indx"):
        energon_plugins.create("batch_format", "plain-torch", {"ignore_indx": -1})


def test_targets_are_the_next_tokens_of_each_sample(registry):
    """Unpacked and packed batches: exactly the samples' targets, none across a boundary."""
    fmt = energon_plugins.create("batch_format", "plain-torch")
    for batch, samples in sample_batches(seed=3):
        out = fmt(batch)
        assert next_token_examples(out) == truth(samples)
        assert int(out["num_loss_tokens"]) == sum(truth(samples).values())


def test_ignore_index_option_and_other_batches(registry):
    fmt = energon_plugins.create("batch_format", "plain-torch", {"ignore_index": -1, "images": False})
    batch, samples = sample_batches(seed=4)[0]
    out = fmt(batch)
    assert "pixel_values" not in out and int((out["labels"] == -100).sum()) == 0
    assert int((out["labels"] != -1).sum()) == sum(truth(samples).values())
    other = {"input_ids": torch.ones(1, 4)}
    assert fmt(other) is other  # a batch of another type passes through unchanged
