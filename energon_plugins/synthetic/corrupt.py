"""Deliberately broken samples and shards, for testing how a pipeline survives bad data.

Corruption (``write_dataset(corrupt=...)``): ``{"image": n}`` replaces n images with bytes that
are not a PNG; ``{"json": n}`` replaces n JSON parts with text that does not parse;
``{"missing_field": n}`` writes n JSON parts that parse but lack the kind's required field
(``REQUIRED_FIELD``): for vqa, captioning and interleaved Energon's own loader fails on them,
for the crude kinds (llava, chatml) Energon delivers them and the task encoder's cooker must
fail; ``{"truncated_shard": n}`` cuts the last n shards in half *after* prepare (at a sample
boundary), so the index still lists the samples of the lost half. The keys affected are in
``DatasetInfo.corrupt_keys``; every other sample stays readable. Energon 7.4.1 skips the
image/json failures through ``WorkerConfig.global_error_handler`` (default: log and skip), but
a read past the end of a truncated shard raises ``ValueError("Unexpected end of tar file:
<shard>")`` from the raw reader, outside the error handler, which ends the iteration: the
samples read before it arrive, the rest of that loader does not.
"""

from __future__ import annotations

import json
import pathlib
import tarfile
from collections.abc import Mapping

from energon_plugins.synthetic.validation import REQUIRED_FIELD


def corrupt_samples(
    kind: str,
    rng,
    intact_keys: list[str],
    parts_by_key: dict[str, dict[str, bytes]],
    corrupt_map: Mapping[str, int],
) -> dict[str, list[str]]:
    """Break the parts of samples drawn (with `rng`) from `intact_keys`, in place.

    `intact_keys` are the keys of the shards that stay whole; `corrupt_map` gives the count per
    reason (``image``, ``json``, ``missing_field``; other reasons are ignored here). Returns
    reason -> the sorted keys that were broken for it; each key is broken for one reason only.
    """
    picks = list(rng.permutation(len(intact_keys)))
    corrupt_keys: dict[str, list[str]] = {}
    for reason in ("image", "json", "missing_field"):
        n = corrupt_map.get(reason, 0)
        if n:
            chosen = sorted(intact_keys[int(i)] for i in picks[:n])
            picks = picks[n:]
            corrupt_keys[reason] = chosen
            for key in chosen:
                parts = parts_by_key[key]
                if reason == "image":
                    name = next(p for p in parts if p.endswith("png"))
                    parts[name] = b"this is not a PNG file " + key.encode()
                elif reason == "json":
                    parts["json"] = b'{"broken": "json' + key.encode()
                else:
                    meta = json.loads(parts["json"])
                    del meta[REQUIRED_FIELD[kind]]
                    parts["json"] = json.dumps(meta).encode()
    return corrupt_keys


def truncate_shard(shard: pathlib.Path, keys: list[str]) -> list[str]:
    """Cut a shard at the header of its middle sample; return the keys that were cut off."""
    with tarfile.open(shard) as tar:
        first_offset: dict[str, int] = {}
        for member in tar.getmembers():
            base = member.name.split(".", 1)[0]
            first_offset.setdefault(base, member.offset)
    cut_index = len(keys) // 2
    offset = first_offset[keys[cut_index]]
    with open(shard, "r+b") as f:
        f.truncate(offset)
    return keys[cut_index:]
