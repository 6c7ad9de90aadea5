"""Per-source statistics as scalars for experiment trackers (TensorBoard, Weights & Biases).

:func:`stats_scalars` flattens what :meth:`EnergonDataloader.stats()
<energon_plugins.EnergonDataloader.stats>` returns into ``{name: number}``: one scalar per source
and counter (``data/SOURCE/tokens``), one per skip reason (``data/SOURCE/skipped/REASON``),
and each source's share of the run's samples and tokens (``data/SOURCE/token_share``), which
is what a blend's weights are meant to steer. Any tracker that logs a mapping takes it as it
is::

    scalars = stats_scalars(train_loader.stats())
    wandb.log(scalars, step=iteration)                       # Weights & Biases
    add_to_tensorboard(writer, train_loader.stats(), iteration)  # torch.utils.tensorboard

A source name is the metadataset leaf's path as written; characters a tracker reads as
structure (``/``, ``:``, spaces) become ``_`` so every source is one level of the name. The
counters are cumulative since the start of the run (and restored with the state), so a
tracker's plot is a running total; the shares are of the totals so far.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SHARES = {"sample_share": "samples", "token_share": "tokens"}
"""Share scalars per source -> the counter they divide over all sources."""

_STRUCTURE = re.compile(r"[^A-Za-z0-9_.\-]+")


def scalar_name(source: str) -> str:
    """``source`` as one level of a scalar's name (``msc://p/ds`` -> ``msc_p_ds``)."""
    return _STRUCTURE.sub("_", source).strip("_") or "_"


def stats_scalars(stats: Mapping[str, Mapping[str, Any]], prefix: str = "data") -> dict[str, float]:
    """``{name: value}`` for every counter, skip reason and share of every source in ``stats``
    (what :meth:`~energon_plugins.EnergonDataloader.stats` returns), names under ``prefix``."""
    scalars: dict[str, float] = {}
    totals = {
        counter: sum(float(counters.get(counter, 0) or 0) for counters in stats.values())
        for counter in SHARES.values()
    }
    for source, counters in sorted(stats.items()):
        base = f"{prefix}/{scalar_name(str(source))}"
        for counter, value in counters.items():
            if counter == "skipped":
                for reason, count in sorted(dict(value or {}).items()):
                    scalars[f"{base}/skipped/{scalar_name(str(reason))}"] = float(count)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                scalars[f"{base}/{counter}"] = float(value)
        for share, counter in SHARES.items():
            total = totals[counter]
            scalars[f"{base}/{share}"] = float(counters.get(counter, 0) or 0) / total if total else 0.0
    return scalars


def add_to_tensorboard(
    writer: Any, stats: Mapping[str, Mapping[str, Any]], step: int, prefix: str = "data"
) -> int:
    """Write :func:`stats_scalars` to a ``torch.utils.tensorboard.SummaryWriter`` (or anything
    with its ``add_scalar(tag, value, global_step)``) at ``step``; returns how many were written.
    TensorBoard itself is the optional extra ``energon-plugins[tensorboard]``."""
    scalars = stats_scalars(stats, prefix)
    for name, value in scalars.items():
        writer.add_scalar(name, value, global_step=step)
    return len(scalars)
