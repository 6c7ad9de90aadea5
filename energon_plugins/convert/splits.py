"""Split ratios and which split each record goes to.

Record ``i`` goes to the split whose share of ``[0, 1)`` holds the fractional part of
``i * 0.618...`` (the golden-ratio sequence): every split's records are spread evenly through
the input, the counts match the ratios within a record or two at any size (so a small
dataset still gets its validation records), and the choice depends only on the record's
position, so a rerun or a resumed run assigns every record the same way.

The shares must sum to 1 (within :data:`SUM_TOLERANCE`): ``train=0.9,val=0.2`` is an error
naming ``--split-ratio`` rather than a silent rescaling to 0.82 / 0.18, since a sum other than
1 is most often a typo. A share of 0 leaves its split out.
"""

import bisect
import math
import re
from collections.abc import Sequence
from typing import Any

from energon_plugins.errors import ConvertError

GOLDEN = (math.sqrt(5) - 1) / 2
POSITIONAL_NAMES = ("train", "val", "test")
_NAME = re.compile(r"^[A-Za-z0-9_]+$")
SUM_TOLERANCE = 1e-6
"""How far from 1 the shares may sum (rounding: 0.7 + 0.15 + 0.15 is 0.9999999999999999)."""


def parse_split_ratio(value: str | Sequence[tuple[str, float]] | dict) -> list[tuple[str, float]]:
    """``"train=0.9,val=0.1"``, ``"0.9,0.05,0.05"`` (train, val, test), a mapping or pairs
    -> ``[(name, ratio), ...]`` (rounding errors taken out so they sum to exactly 1), splits
    with ratio 0 left out.

    Raises:
        ConvertError: a malformed entry, a negative ratio, a repeated name, no train share, or
            shares that do not sum to 1 (naming ``--split-ratio``, the sum and rescaled shares).
    """
    pairs: list[tuple[str, float]] = []
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",") if item.strip()]
        for position, item in enumerate(items):
            name, sep, number = item.partition("=")
            if not sep:
                if position >= len(POSITIONAL_NAMES):
                    raise ConvertError(
                        f"split ratio {value!r}: more than 3 unnamed ratios "
                        "(name them: train=..,val=..,test=..)"
                    )
                name, number = POSITIONAL_NAMES[position], item
            try:
                pairs.append((name.strip(), float(number)))
            except ValueError:
                raise ConvertError(f"split ratio {value!r}: {number.strip()!r} is not a number") from None
    else:
        items_ = value.items() if isinstance(value, dict) else value
        pairs = [(str(name), float(ratio)) for name, ratio in items_]
    names = [name for name, _ in pairs]
    for name, ratio in pairs:
        if not _NAME.match(name):
            raise ConvertError(f"split ratio: split name {name!r} must be letters, digits or _")
        if not ratio >= 0 or math.isinf(ratio):
            raise ConvertError(f"split ratio: {name}={ratio} must be a finite number >= 0")
    if len(set(names)) != len(names):
        raise ConvertError(f"split ratio: a split is named twice ({', '.join(names)})")
    total = sum(ratio for _, ratio in pairs)
    if not dict(pairs).get("train"):
        raise ConvertError(f"split ratio {value!r}: the train split needs a share above 0")
    if abs(total - 1) > SUM_TOLERANCE:
        rescaled = ",".join(f"{name}={ratio / total:.4g}" for name, ratio in pairs if ratio > 0)
        raise ConvertError(
            f"--split-ratio {_shown(value)}: the shares sum to {total:.6g}, not 1 "
            f"(for these proportions: --split-ratio {rescaled})"
        )
    return [(name, ratio / total) for name, ratio in pairs if ratio > 0]


def _shown(value: Any) -> str:
    """The split ratio as the user gave it, for a message."""
    if isinstance(value, str):
        return repr(value)
    items = value.items() if isinstance(value, dict) else value
    return repr(",".join(f"{name}={ratio}" for name, ratio in items))


class SplitAssigner:
    """``assigner(index) -> split name`` for normalised ratios (see the module docstring)."""

    def __init__(self, ratios: Sequence[tuple[str, float]]) -> None:
        self.names = [name for name, _ in ratios]
        self._bounds: list[float] = []
        cumulative = 0.0
        for _, ratio in ratios[:-1]:
            cumulative += ratio
            self._bounds.append(cumulative)

    def __call__(self, index: int) -> str:
        """The split of record ``index``."""
        return self.names[bisect.bisect_right(self._bounds, (index * GOLDEN) % 1.0)]
