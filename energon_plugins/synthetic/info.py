"""The record of a written dataset: :class:`DatasetInfo` (paths, splits, samples, corrupt keys)."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What a generator wrote.

    Attributes:
        path: the dataset directory (for :func:`write_demo_datasets`, the metadataset YAML).
        kind: the dataset kind (``"metadataset"`` for :func:`write_demo_datasets`).
        split_keys: split name -> sample ``__key__`` values in that split, in shard order.
        samples: ``__key__`` -> the source record (text fields, image sizes, colours, ...).
        shards: the tar shards, in writing order.
        corrupt_keys: corruption reason (``image``, ``json``, ``truncated_shard``) -> keys.
    """

    path: pathlib.Path
    kind: str
    split_keys: dict[str, list[str]]
    samples: dict[str, dict]
    shards: list[pathlib.Path]
    corrupt_keys: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def good_keys(self) -> set[str]:
        """All keys that are not corrupt."""
        bad = {key for keys in self.corrupt_keys.values() for key in keys}
        return set(self.samples) - bad

    def to_json(self) -> dict:
        """A JSON-serialisable form (used by the reuse stamp)."""
        return {
            "path": str(self.path),
            "kind": self.kind,
            "split_keys": self.split_keys,
            "samples": self.samples,
            "shards": [str(s) for s in self.shards],
            "corrupt_keys": self.corrupt_keys,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DatasetInfo:
        """Inverse of :meth:`to_json`."""
        return cls(
            path=pathlib.Path(data["path"]),
            kind=data["kind"],
            split_keys={k: list(v) for k, v in data["split_keys"].items()},
            samples=dict(data["samples"]),
            shards=[pathlib.Path(s) for s in data["shards"]],
            corrupt_keys={k: list(v) for k, v in data.get("corrupt_keys", {}).items()},
        )
