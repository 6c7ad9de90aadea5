"""The component protocols (:mod:`energon_plugins.host.protocols`) against the real built-ins.

Every built-in component of the core distribution, built with :func:`energon_plugins.create`
as users build it, satisfies the protocol of its kind, and the protocols reject objects that
lack a member, so a built-in that drifts from its contract (or a protocol that drifts from the
code) fails here.
"""

import subprocess
import sys

import pytest

import energon_plugins
from energon_plugins import BuildContext
from energon_plugins.host import (
    PROTOCOL_FOR_KIND,
    BatchFormatProtocol,
    ImageProcessorProtocol,
    PackingStrategyProtocol,
    SourceFilesProtocol,
    SourceFormatProtocol,
    TaskEncoderProtocol,
)
from energon_plugins.host.defaults import CORE_DISTRIBUTION

# Options a built-in needs to build without files or downloads (kind, name) -> options.
BUILD_OPTIONS = {
    ("image_processor", "hf"): {"class_name": "CLIPImageProcessor"},
}


def builtin_names(kind: str) -> list[str]:
    """The names the core distribution registers for ``kind``."""
    return [
        info.name
        for info in energon_plugins.available(kind)
        if info.distribution == CORE_DISTRIBUTION and info.status != "failed"
    ]


def build(kind: str, name: str, context: BuildContext | None = None):
    """Build the core's ``name`` of ``kind`` (selected as ``energon-plugins:NAME``)."""
    return energon_plugins.create(
        kind, f"{CORE_DISTRIBUTION}:{name}", BUILD_OPTIONS.get((kind, name)), context
    )


def test_every_kind_has_a_protocol() -> None:
    assert set(PROTOCOL_FOR_KIND) == set(energon_plugins.KINDS)
    assert PROTOCOL_FOR_KIND["packing_strategy"] is PackingStrategyProtocol


def test_builtin_task_encoders_satisfy_the_protocol(tokenizer) -> None:
    names = builtin_names("task_encoder")
    assert "multimodal" in names
    context = BuildContext(
        tokenizer=tokenizer,
        image_processor=build("image_processor", "hf"),
        seq_length=128,
    )
    for name in names:
        encoder = build("task_encoder", name, context)
        assert isinstance(encoder, TaskEncoderProtocol), name
        assert not isinstance(encoder, PackingStrategyProtocol), name


def test_builtin_image_processors_satisfy_the_protocol() -> None:
    from PIL import Image

    names = builtin_names("image_processor")
    assert "hf" in names
    for name in names:
        processor = build("image_processor", name)
        assert isinstance(processor, ImageProcessorProtocol), name
        out = processor(images=[Image.new("RGB", (40, 30), (200, 10, 10))], return_tensors="pt")
        assert "pixel_values" in out, name
        assert out["pixel_values"].shape[0] == 1, name


def test_builtin_packing_strategies_satisfy_the_protocol() -> None:
    names = builtin_names("packing_strategy")
    assert {"none", "first-fit-decreasing", "best-fit-decreasing", "greedy-knapsack"} <= set(names)
    lengths = [5, 3, 4, 2, 6]
    for name in names:
        strategy = build("packing_strategy", name)
        assert isinstance(strategy, PackingStrategyProtocol), name
        assert strategy.name == name
        groups = strategy.select(lengths, 8)
        used = [index for group in groups for index in group]
        assert len(used) == len(set(used)), name
        assert all(sum(lengths[i] for i in group) <= 8 for group in groups), name


def test_builtin_batch_formats_satisfy_the_protocol() -> None:
    names = builtin_names("batch_format")
    assert {"megatron-bridge", "megatron-lm", "hf"} <= set(names)
    foreign = {"a user's own": "batch"}
    for name in names:
        fmt = build("batch_format", name)
        assert isinstance(fmt, BatchFormatProtocol), name
        assert fmt(foreign) is foreign, name  # a batch of another type passes through


def test_builtin_source_formats_satisfy_the_protocol() -> None:
    names = builtin_names("source_format")
    assert {"llava-json", "sharegpt", "hf-parquet"} <= set(names)
    for name in names:
        reader = build("source_format", name)
        assert isinstance(reader, SourceFormatProtocol), name
        assert isinstance(reader, SourceFilesProtocol), name


class _Incomplete:
    """Has ``select`` but no ``name``; no ``scan``; not a task encoder."""

    def select(self, lengths, capacity):
        return [[i] for i in range(len(lengths))]

    def load(self, payload):
        return payload


@pytest.mark.parametrize(
    "protocol",
    [
        TaskEncoderProtocol,
        PackingStrategyProtocol,
        SourceFormatProtocol,
        SourceFilesProtocol,
    ],
)
def test_a_component_missing_a_member_fails_its_protocol(protocol) -> None:
    assert not isinstance(_Incomplete(), protocol)


def test_any_callable_is_a_batch_format_and_a_plain_object_is_not() -> None:
    assert isinstance(len, BatchFormatProtocol) and isinstance(len, ImageProcessorProtocol)
    assert not isinstance(object(), BatchFormatProtocol)


def test_protocols_import_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import energon_plugins.host.protocols\n"
        "heavy = [m for m in ('torch', 'transformers', 'megatron', 'pydantic') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
