"""The realised mix of a blend next to its configured weights.

A metadataset ``blend`` asks for a share of the samples per leaf: each entry's ``weight`` over
the sum of its list's weights, multiplied down nested blends (:func:`configured_shares`, from
:func:`~energon_plugins.config.blend_walk.walk_split`). What a loader delivered is in its
per-source counters (:meth:`EnergonDataloader.stats() <energon_plugins.EnergonDataloader.stats>`);
:func:`realised_mix` sets the two side by side, one :class:`MixRow` per source: the configured
share, and the realised shares of samples, tokens and loss tokens. ``energon-plugins bench``
and ``preview`` print them as a table after their own output::

    from energon_plugins.loading.mix_report import configured_shares, realised_mix

    rows = realised_mix(loader.stats(), configured_shares(datamodule.path))

Energon draws every sample's leaf at random with these shares (per worker), so over ``n``
samples a leaf's realised share differs from its configured ``p`` by about
``sqrt(p * (1 - p) / n)``; token shares also follow the leaves' sample lengths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from energon_plugins.loading.source_stats import normalized

SHARED_COUNTERS = ("samples", "tokens", "loss_tokens")
"""The counters of ``stats()`` whose shares a :class:`MixRow` holds."""


@dataclasses.dataclass(frozen=True)
class MixRow:
    """One source of a blend: what was configured and what was read.

    Attributes:
        source: the source name (the leaf's ``path`` as the metadataset YAML writes it, as in
            ``stats()`` and ``__sources__``).
        configured: its configured share of the samples (``None``: a source that was read but
            is not a weighted leaf of the blend).
        samples: how many of its samples were read.
        sample_share: its share of the samples read (0 when nothing was read).
        token_share: its share of the real tokens read.
        loss_token_share: its share of the loss tokens read.
    """

    source: str
    configured: float | None
    samples: int
    sample_share: float
    token_share: float
    loss_token_share: float

    def as_dict(self) -> dict[str, Any]:
        """The row as plain JSON values (shares rounded to 4 digits)."""
        row = dataclasses.asdict(self)
        for key in ("configured", "sample_share", "token_share", "loss_token_share"):
            if row[key] is not None:
                row[key] = round(row[key], 4)
        return row


def configured_shares(path: Any, split: str = "train") -> dict[str, float] | None:
    """``{source: configured share of the samples}`` of ``split`` of the metadataset ``path``,
    in the order of the YAML; ``None`` when the split is not a weighted blend (a single
    dataset, one leaf alone, a join, a ``blend_epochized``) or cannot be read.

    Leaves are named as ``stats()`` names them (a dataset reached twice under two spellings
    takes the first; their shares add up).
    """
    if not str(path).endswith((".yaml", ".yml")):
        return None
    from energon_plugins.config.blend_walk import walk_split
    from energon_plugins.errors import DatasetError

    try:
        leaves = walk_split(path, split).leaves
    except DatasetError:
        return None
    if not leaves or any(leaf.share is None for leaf in leaves):
        return None
    names: dict[str, str] = {}
    shares: dict[str, float] = {}
    for leaf in leaves:
        name = names.setdefault(normalized(leaf.path), leaf.written)
        shares[name] = shares.get(name, 0.0) + float(leaf.share or 0.0)
    return shares


def realised_mix(stats: Mapping[str, Mapping[str, Any]], configured: Mapping[str, float]) -> list[MixRow]:
    """One :class:`MixRow` per configured source (in ``configured``'s order, read or not), then
    any other source ``stats`` holds; ``stats``: what ``EnergonDataloader.stats()`` returns."""
    totals = {
        counter: sum(int(counters.get(counter, 0) or 0) for counters in stats.values())
        for counter in SHARED_COUNTERS
    }

    def share(source: str, counter: str) -> float:
        total = totals[counter]
        return int(stats.get(source, {}).get(counter, 0) or 0) / total if total else 0.0

    sources = [*configured, *(source for source in stats if source not in configured)]
    return [
        MixRow(
            source=source,
            configured=configured.get(source),
            samples=int(stats.get(source, {}).get("samples", 0) or 0),
            sample_share=share(source, "samples"),
            token_share=share(source, "tokens"),
            loss_token_share=share(source, "loss_tokens"),
        )
        for source in sources
    ]


def datamodule_mix(datamodule: Any, split: str = "train") -> list[MixRow] | None:
    """:func:`realised_mix` of what ``datamodule``'s training loader has delivered so far
    against the blend of its ``path``; ``None`` when ``path`` is not a weighted blend."""
    configured = configured_shares(datamodule.path, split)
    if configured is None:
        return None
    return realised_mix(datamodule.train_dataloader().stats(), configured)
