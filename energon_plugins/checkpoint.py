"""Saving and loading loader states per data-parallel rank, with a check that they fit.

A state file ``train_dataloader_dprank{NNN}.pt`` holds the Energon loader state and a
*fingerprint* of what produced it (world size, dataset, task encoder, batch settings...).
Restoring into a different setup would silently replay or skip data, so loading compares the
fingerprints and names every key that differs.
"""

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_plugins.errors import EnergonPluginsError

STATE_FORMAT = 1
STATE_FILE = "train_dataloader_dprank{rank:03d}.pt"


class StateMismatchError(EnergonPluginsError, ValueError):
    """A saved loader state was made by a different setup than the one restoring it."""


def state_path(folder: str | os.PathLike, dp_rank: int) -> Path:
    """The state file of ``dp_rank`` under ``folder``."""
    if dp_rank < 0:
        raise ValueError(f"dp_rank must be >= 0, got {dp_rank}")
    return Path(folder) / STATE_FILE.format(rank=dp_rank)


def fingerprint_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``key: saved X, now Y`` for every key whose value differs (missing keys included)."""
    missing = object()
    lines = []
    for key in sorted(set(saved) | set(current)):
        before, now = saved.get(key, missing), current.get(key, missing)
        if before != now:
            show = lambda v: "(absent)" if v is missing else repr(v)  # noqa: E731
            lines.append(f"{key}: saved {show(before)}, now {show(now)}")
    return lines


def save_loader_state(
    folder: str | os.PathLike, state: Any, *, dp_rank: int, fingerprint: Mapping[str, Any]
) -> Path:
    """Write ``state`` and ``fingerprint`` to ``folder``'s file for ``dp_rank``, atomically."""
    import torch

    path = state_path(folder, dp_rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": STATE_FORMAT, "fingerprint": dict(fingerprint), "state": state}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_loader_state(
    folder: str | os.PathLike,
    *,
    dp_rank: int,
    fingerprint: Mapping[str, Any] | None = None,
) -> Any:
    """Read the state of ``dp_rank`` from ``folder``; check it against ``fingerprint``.

    The file holds Energon's state objects, so it is loaded with ``weights_only=False``
    (torch's default refuses it): load only checkpoints you wrote.

    Raises:
        FileNotFoundError: no state file for this rank (the message lists the ones present).
        StateMismatchError: the state was saved by a different setup; names what differs.
    """
    import torch

    path = state_path(folder, dp_rank)
    if not path.is_file():
        present = sorted(p.name for p in Path(folder).glob("train_dataloader_dprank*.pt"))
        raise FileNotFoundError(
            f"no loader state for DP rank {dp_rank}: {path} does not exist"
            f" (present: {', '.join(present) or 'none'})"
        )
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
        raise StateMismatchError(f"{path}: not a loader state written by energon-plugins")
    if fingerprint is not None:
        differences = fingerprint_differences(payload["fingerprint"], fingerprint)
        if differences:
            raise StateMismatchError(
                f"{path} was saved by a different setup; restoring it would replay or skip "
                "data. Differences: " + "; ".join(differences)
            )
    return payload["state"]
