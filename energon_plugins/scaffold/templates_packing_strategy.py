"""Templates of a packing-strategy plugin: next-fit packing in stream order."""

KIND_TEXT = "packing strategy"
MODULE = "strategy"
MODULE_TEXT = (
    "the packing strategy: `select(lengths, capacity)` returns groups of buffer indices, each "
    "group's total length at most `capacity`, each index at most once."
)
FACTORY = "build_packing_strategy"
CHECK = "check_packing_strategy"
CONFIG_INTRO = (
    "Select it as the packing strategy of a datamodule config (packing needs a packing "
    "buffer, and a task encoder that packs, such as the built-in `multimodal`):"
)
CONFIG_EXAMPLE = """\
path: /data/my-vqa-dataset
seq_length: 4096
micro_batch_size: 1
packing_buffer_size: 64
tokenizer: {path: /models/my-tokenizer}
image_processor: {name: hf}
task_encoder: {name: multimodal}
packing:
  name: ${name}
  options:
    max_samples_per_pack: 8"""
OPTIONS_TABLE = """\
| option | default | meaning |
| --- | --- | --- |
| `max_samples_per_pack` | `null` | at most this many samples in one pack (`null`: no limit) |"""

OPTIONS = '''\
"""Options of the ``${name}`` packing strategy (import-light: pydantic only)."""

from pydantic import BaseModel, ConfigDict, Field


class ${class_name}Options(BaseModel):
    """Options of the ``${name}`` packing strategy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_samples_per_pack: int | None = Field(
        default=None, ge=1, description="At most this many samples in one pack (None: no limit)."
    )
'''


COMPONENT = '''\
"""The ``${name}`` packing strategy: next-fit, keeping the stream order.

Samples are taken in buffer order; each goes into the current pack if it fits, else it starts
a new pack. A sample longer than the capacity gets a pack of its own (the task encoder cuts
it to the capacity). Pure Python and deterministic: the same lengths give the same packs.
"""

from collections.abc import Sequence
from typing import Any

from ${package}.options import ${class_name}Options


class ${class_name}Strategy:
    """Next-fit packing: ``select(lengths, capacity) -> list[list[int]]``."""

    def __init__(self, options: ${class_name}Options | None = None) -> None:
        self.options = options if options is not None else ${class_name}Options()

    def select(self, lengths: Sequence[int], capacity: int) -> list[list[int]]:
        """Group buffer indices into packs of total length at most ``capacity``."""
        if capacity < 1:
            raise ValueError(f"${name}: capacity must be >= 1, got {capacity}")
        limit = self.options.max_samples_per_pack
        groups: list[list[int]] = []
        current: list[int] = []
        room = capacity
        for index, length in enumerate(lengths):
            if length > capacity:
                groups.append([index])  # overlong: alone
                continue
            full = limit is not None and len(current) >= limit
            if current and (length > room or full):
                groups.append(current)
                current, room = [], capacity
            current.append(index)
            room -= length
        if current:
            groups.append(current)
        groups.sort(key=lambda group: group[0])
        return groups


def build_packing_strategy(
    options: ${class_name}Options | None, context: Any = None
) -> ${class_name}Strategy:
    """Factory of ``${name}`` (``factory(options, context)``)."""
    return ${class_name}Strategy(options)
'''

TESTS = '''\
"""Tests of ${distribution}: the energon-plugins conformance check, then its own behaviour."""

import energon_plugins
from energon_plugins.testing import check_packing_strategy


def test_conforms_to_the_packing_contract():
    # registration, options, and invariants on many random buffers: each index at most
    # once, no pack over capacity, every sample that fits placed, deterministic
    check_packing_strategy("${name}")
    check_packing_strategy("${name}", options={"max_samples_per_pack": 2})


def test_next_fit_keeps_the_stream_order():
    strategy = energon_plugins.create("packing_strategy", "${name}")
    assert strategy.select([3, 3, 5, 1, 9, 2], 6) == [[0, 1], [2, 3], [4], [5]]
    limited = energon_plugins.create("packing_strategy", "${name}", {"max_samples_per_pack": 1})
    assert limited.select([1, 1, 1], 6) == [[0], [1], [2]]
'''
