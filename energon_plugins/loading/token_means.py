"""Mean tokens per sample of each blend entry, measured through the run's own task encoder.

:func:`measure_entries` reads training batches of a datamodule (its blend, encoder, image
processor and limits as configured) and sums the loader's per-source counters
(``EnergonDataloader.stats()``) per blend entry until every entry has been seen
``per_entry`` times or ``max_samples`` samples were read. What ``blend plan`` divides by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

TOKEN_KINDS = ("tokens", "loss_tokens", "text_tokens", "image_tokens", "video_tokens")
"""What a share can be a share of: all real tokens, the answer (loss) tokens, the text tokens
(real minus image and video tokens), or the image / video tokens."""


@dataclasses.dataclass
class EntryTokens:
    """What was read of one blend entry: ``samples`` and the summed counters of its sources."""

    samples: int = 0
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def total(self, kind: str) -> int:
        """The entry's tokens of ``kind`` (one of :data:`TOKEN_KINDS`)."""
        if kind == "text_tokens":
            return (
                self.counts.get("tokens", 0)
                - self.counts.get("image_tokens", 0)
                - self.counts.get("video_tokens", 0)
            )
        return self.counts.get(kind, 0)

    def mean(self, kind: str) -> float:
        """Mean tokens of ``kind`` per sample (0.0 before any sample)."""
        return self.total(kind) / self.samples if self.samples else 0.0


def entry_tokens(
    stats: Mapping[str, Mapping[str, Any]], entries: Mapping[str, Sequence[str]]
) -> dict[str, EntryTokens]:
    """``stats()`` (per source) summed per entry (``entries``: entry -> its source names)."""
    out = {}
    for entry, sources in entries.items():
        tokens = EntryTokens()
        for source in sources:
            counts = stats.get(source, {})
            tokens.samples += int(counts.get("samples", 0))
            for key, value in counts.items():
                if isinstance(value, int):
                    tokens.counts[key] = tokens.counts.get(key, 0) + value
        out[entry] = tokens
    return out


def measure_entries(
    datamodule: Any,
    entries: Mapping[str, Sequence[str]],
    *,
    per_entry: int,
    max_samples: int,
    progress: Callable[[int], None] | None = None,
) -> dict[str, EntryTokens]:
    """Read training batches of ``datamodule`` until each entry of ``entries`` (entry -> the
    source names of its datasets) has ``per_entry`` samples or ``max_samples`` were read.

    ``progress(samples_read)`` is called after each batch. The loader is closed on return.
    """
    loader = datamodule.train_dataloader()
    try:
        iterator = iter(loader)
        while True:
            next(iterator)
            measured = entry_tokens(loader.stats(), entries)
            read = sum(t.samples for t in measured.values())
            if progress is not None:
                progress(read)
            if read >= max_samples or all(t.samples >= per_entry for t in measured.values()):
                return measured
    finally:
        loader.close()
