"""The dataset kinds, the corruptions, and the checks of ``write_dataset``'s arguments."""

from __future__ import annotations

from collections.abc import Sequence

KINDS = ("vqa", "captioning", "interleaved", "llava", "chatml")
CORRUPTIONS = ("image", "json", "missing_field", "truncated_shard")
# The JSON field each kind needs; "missing_field" corruption leaves it out.
REQUIRED_FIELD = {
    "vqa": "question",
    "captioning": "caption",
    "interleaved": "sequence",
    "llava": "conversations",
    "chatml": "conversations",
}


def _split_shard_counts(num_shards: int, split_ratio: Sequence[tuple[str, float]]) -> dict[str, int]:
    """Shards per split, computed exactly as Energon's prepare assigns them."""
    total = sum(ratio for _, ratio in split_ratio)
    counts: dict[str, int] = {}
    cumulative = 0.0
    offset = 0
    for name, ratio in split_ratio:
        cumulative += ratio / total
        end = int(num_shards * cumulative)
        counts[name] = end - offset
        offset = end
    return counts


def validate_args(kind, num_samples, samples_per_shard, split_ratio, image_size, corrupt):
    """Check :func:`~energon_plugins.synthetic.write_dataset`'s arguments; ValueError names the bad one.

    Returns ``(split_ratio, sizes, corrupt, num_shards)``: the split ratios as ``(name, float)``
    pairs, the image sizes as ``((min_w, min_h), (max_w, max_h))``, the corruption counts as a
    dict, and the number of shards the samples fill.
    """
    if kind not in KINDS:
        raise ValueError(f"kind: unknown dataset kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive integer, got {num_samples!r}")
    if not isinstance(samples_per_shard, int) or samples_per_shard < 1:
        raise ValueError(f"samples_per_shard: must be a positive integer, got {samples_per_shard!r}")
    split_ratio = [(str(name), float(ratio)) for name, ratio in split_ratio]
    if not split_ratio:
        raise ValueError("split_ratio: at least one split is needed")
    names = [name for name, _ in split_ratio]
    if len(set(names)) != len(names):
        raise ValueError(f"split_ratio: split names must be unique, got {names}")
    for name, ratio in split_ratio:
        if not ratio > 0:
            raise ValueError(f"split_ratio: split {name!r} has ratio {ratio}; ratios must be > 0")
    num_shards = -(-num_samples // samples_per_shard)
    counts = _split_shard_counts(num_shards, split_ratio)
    empty = [name for name, count in counts.items() if count == 0]
    if empty:
        raise ValueError(
            f"split_ratio: split(s) {', '.join(map(repr, empty))} would be empty: Energon assigns "
            f"whole shards to splits and {num_samples} samples at {samples_per_shard} per shard make "
            f"only {num_shards} shard(s) (shards per split: {counts}). Use more samples or fewer "
            f"samples_per_shard."
        )
    sizes = _parse_image_size(image_size)
    corrupt = dict(corrupt or {})
    for reason, count in corrupt.items():
        if reason not in CORRUPTIONS:
            raise ValueError(
                f"corrupt: unknown corruption {reason!r}; expected one of {', '.join(CORRUPTIONS)}"
            )
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"corrupt[{reason!r}]: must be a non-negative integer, got {count!r}")
    truncated = corrupt.get("truncated_shard", 0)
    if truncated >= num_shards:
        raise ValueError(
            f"corrupt['truncated_shard']: {truncated} shard(s) to truncate leaves no intact shard "
            f"out of {num_shards}"
        )
    intact = (num_shards - truncated) * samples_per_shard
    intact = min(intact, num_samples)
    needed = sum(corrupt.get(r, 0) for r in ("image", "json", "missing_field"))
    if needed > intact:
        raise ValueError(
            f"corrupt: {needed} image/json/missing_field corruptions requested but only {intact} samples lie in "
            f"untruncated shards"
        )
    return split_ratio, sizes, corrupt, num_shards


def _parse_image_size(image_size) -> tuple[tuple[int, int], tuple[int, int]]:
    """Return ((min_w, min_h), (max_w, max_h)) from a fixed (w, h) or a range."""
    try:
        if len(image_size) == 2 and all(isinstance(v, int) for v in image_size):
            w, h = image_size
            lo, hi = (w, h), (w, h)
        else:
            (lw, lh), (hw, hh) = image_size
            lo, hi = (int(lw), int(lh)), (int(hw), int(hh))
    except (TypeError, ValueError):
        raise ValueError(
            f"image_size: expected (w, h) or ((min_w, min_h), (max_w, max_h)), got {image_size!r}"
        ) from None
    if min(lo) < 4 or hi[0] < lo[0] or hi[1] < lo[1]:
        raise ValueError(f"image_size: sizes must be >= 4 pixels and min <= max, got {image_size!r}")
    return lo, hi
