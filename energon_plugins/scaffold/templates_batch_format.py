"""Templates of a batch-format plugin: the ``hf`` format's keyword arguments and a loss-token count."""

KIND_TEXT = "batch format"
MODULE = "batch_format"
MODULE_TEXT = (
    "the batch format, a `BatchFormat` subclass whose `format(batch)` turns the task "
    "encoder's `MultiModalBatch` into what the training loop reads (the base class passes "
    "any other batch through unchanged)."
)
FACTORY = "build_batch_format"
CHECK = "check_batch_format"
CONFIG_INTRO = "Select it as the batch format of a datamodule config:"
CONFIG_EXAMPLE = """\
path: /data/my-vqa-dataset
seq_length: 1024
micro_batch_size: 4
tokenizer: {path: /models/my-model}
image_processor: {name: hf}
task_encoder: {name: multimodal}
batch_format:
  name: ${name}
  options:
    count_key: num_items_in_batch
    images: true"""
OPTIONS_TABLE = """\
| option | default | meaning |
| --- | --- | --- |
| `count_key` | `num_loss_tokens` | the key holding the number of tokens the loss covers in the batch |
| `images` | `true` | pass `pixel_values` (and the other vision inputs) through; `false` drops them |"""

OPTIONS = '''\
"""Options of the ``${name}`` batch format (import-light: pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field


class ${class_name}Options(BaseModel):
    """Options of the ``${name}`` batch format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count_key: str = Field(
        default="num_loss_tokens", min_length=1,
        description="The key holding the number of tokens the loss covers in the batch.",
    )
    images: bool = Field(
        default=True, description="Pass the vision inputs through (False: drop them)."
    )
'''


COMPONENT = '''\
"""The ``${name}`` batch format: a transformers model's ``forward`` arguments and a token count.

It wraps the built-in ``hf`` format (``input_ids``, ``labels`` aligned with them and ``-100``
where the loss is off, ``attention_mask`` or, packed, ``position_ids``, the vision inputs) and
adds the number of tokens the loss covers after the model's shift, under ``count_key``: what a
loop accumulating gradients over micro-batches divides the summed loss by. It runs in the
loader's worker processes, so its output (a dict of tensors) pickles.
"""

from typing import Any

from energon_plugins import BatchFormat, BuildContext
from energon_plugins.encoding.batch_formats.hf import HFFormat

from ${package}.options import ${class_name}Options

TEXT_KEYS = ("input_ids", "labels", "attention_mask", "position_ids", "use_cache")


class ${class_name}Format(BatchFormat):
    """``hf``'s ``forward`` keyword arguments plus ``count_key``: a plain dict."""

    name = "${name}"

    def __init__(self, context: BuildContext | None = None,
                 options: ${class_name}Options | None = None) -> None:
        options = options if options is not None else ${class_name}Options()
        super().__init__(context, options)
        self.inner = HFFormat(self.context)

    def format(self, batch: Any) -> dict[str, Any]:
        """The loop's dict for one collated batch (a ``MultiModalBatch``)."""
        out = self.inner.format(batch)
        if not self.options.images:
            out = {key: value for key, value in out.items() if key in TEXT_KEYS}
        # the model predicts labels[:, 1:] from positions [:, :-1]; hf masks packed boundaries
        out[self.options.count_key] = (out["labels"][:, 1:] != self.ignore_index).sum()
        return out


def build_batch_format(
    options: ${class_name}Options | None, context: BuildContext | None = None
) -> ${class_name}Format:
    """Factory of ``${name}`` (``factory(options, context)``)."""
    return ${class_name}Format(context, options)

'''

TESTS = '''\
"""Tests of ${distribution}: the energon-plugins conformance check, then its own behaviour."""

import torch

import energon_plugins
from energon_plugins.testing import check_batch_format
from energon_plugins.testing.batch_format import sample_batches, truth


def test_conforms_to_the_batch_format_contract():
    # registration, options, pass-through of other batches, input unchanged, determinism,
    # pickling, and exactly the samples' training examples as a transformers model reads them
    check_batch_format("${name}", labels="aligned")
    check_batch_format("${name}", labels="aligned", options={"images": False})


def test_the_count_is_the_tokens_the_loss_covers():
    fmt = energon_plugins.create("batch_format", "${name}", {"count_key": "n"})
    for batch, samples in sample_batches(seed=5):  # unpacked and packed batches
        out = fmt(batch)
        assert int(out["n"]) == sum(truth(samples).values())
    other = {"input_ids": torch.ones(1, 4)}
    assert fmt(other) is other  # a batch of another type passes through unchanged
'''
