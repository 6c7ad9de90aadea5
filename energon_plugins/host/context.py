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
    """Context-parallel size of the model (``pg_collection.cp.size()``); packing pads every
    sub-sequence to a multiple of ``2 * cp_size`` when it is above 1."""
    tp_size: int = 1
    """Tensor-parallel size of the model (``pg_collection.tp.size()``)."""
    sequence_parallel: bool | None = None
    """Whether the model runs sequence parallelism; with ``tp_size`` > 1 packing then pads
    every sub-sequence to a multiple of ``cp_size * tp_size``. ``None`` (unknown) pads as if
    it were on, which is valid either way."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Free-form values a host application passes to its own plugins."""

    def replace(self, **changes: Any) -> "BuildContext":
        """Return a copy with ``changes`` applied (e.g. ``ctx.replace(split="val")``)."""
        return dataclasses.replace(self, **changes)
