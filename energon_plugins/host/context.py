"""The build context every factory receives."""

import dataclasses
from typing import Any, Literal


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """What a factory knows about the run when it builds a component.

    The datamodule fills it after every override is applied, so a component never sees a
    stale ``seq_length`` or packing setting.
    """

    tokenizer: Any = None
    image_processor: Any = None
    sample_config: Any = None
    seq_length: int = 2048
    decoder_seq_length: int | None = None
    micro_batch_size: int = 1
    packing: Any = None
    """The selected packing strategy object (``select(lengths, capacity)``), or ``None``."""
    packing_buffer_size: int | None = None
    split: Literal["train", "val"] = "train"
    cp_size: int = 1
    """Context-parallel size (``pg_collection.cp``): packed sequences are padded for it."""
    tp_size: int = 1
    """Tensor-parallel size (``pg_collection.tp``)."""
    sequence_parallel: bool = False
    """Whether the model uses sequence parallelism (then ``tp_size`` matters for padding)."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Free-form values a host application passes to its own plugins."""

    def replace(self, **changes: Any) -> "BuildContext":
        """Return a copy with ``changes`` applied (e.g. ``ctx.replace(split="val")``)."""
        return dataclasses.replace(self, **changes)
