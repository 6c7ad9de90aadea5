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


# --------------------------------------------------------------------------- datamodule level
def dataset_identity(path: str | os.PathLike) -> str:
    """What identifies a dataset across mounts: ``.nv-meta/index.uuid``, else a content hash.

    A prepared folder is named by the uuid Energon's prepare wrote (moving the folder keeps
    it); a metadataset YAML by the SHA-256 of its text; anything else by its resolved path.
    """
    import hashlib

    p = Path(path).expanduser()
    uuid_file = p / ".nv-meta" / "index.uuid"
    if uuid_file.is_file():
        return "uuid:" + uuid_file.read_text(encoding="utf-8").strip()
    if p.is_file():
        return "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return "path:" + str(p.resolve())


def _describe_component(arg: Any, built: Any) -> tuple[str, Any]:
    """``(name, options)`` of a task encoder or packing selection, for the fingerprint."""
    if isinstance(arg, str):
        return arg, None
    if isinstance(arg, Mapping):
        options = arg.get("options")
        if hasattr(options, "model_dump"):
            options = options.model_dump(mode="json")
        return str(arg.get("name")), options
    obj = built if built is not None else arg
    if obj is None:
        return "None", None
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}", None


def loader_fingerprint(datamodule: Any, *, dp_rank: int, dp_world_size: int) -> dict[str, Any]:
    """What must match for a saved training-loader state to continue the same stream.

    World size and rank of the data-parallel group, the dataset (see
    :func:`dataset_identity`), the task encoder (plugin name and options, or class) and its
    error policy, sequence length, micro batch size, worker count, shuffle and packing
    settings, and the extra ``get_train_dataset`` arguments.
    """
    encoder_arg = getattr(datamodule, "_task_encoder_arg", None)
    encoder = datamodule.task_encoder
    name, options = _describe_component(encoder_arg, encoder)
    if encoder_arg is None:
        name = "multimodal"
    packing = getattr(datamodule, "packing", None)
    return {
        "dp_world_size": int(dp_world_size),
        "dp_rank": int(dp_rank),
        "dataset": dataset_identity(datamodule.path),
        "task_encoder": name,
        "task_encoder_options": options,
        "on_error": getattr(encoder, "on_error", None) if encoder is not None else None,
        "seq_length": datamodule.seq_length,
        "decoder_seq_length": datamodule.decoder_seq_length,
        "micro_batch_size": datamodule.micro_batch_size,
        "num_workers": datamodule.num_workers,
        "shuffle_buffer_size": datamodule.shuffle_buffer_size,
        "max_samples_per_sequence": datamodule.max_samples_per_sequence,
        "packing_buffer_size": datamodule.packing_buffer_size,
        "packing": None
        if packing is None
        else f"{type(packing).__module__}.{type(packing).__qualname__}",
        "energon_kwargs": {
            k: repr(v) for k, v in sorted(getattr(datamodule, "kwargs", {}).items())
        },
    }


def _dp_rank_and_size(datamodule: Any) -> tuple[int, int]:
    loader = getattr(datamodule, "train_dataloader_object", None)
    worker_config = getattr(getattr(loader, "dataloader", None), "worker_config", None)
    if worker_config is None:
        worker_config = datamodule._build_worker_config(datamodule.num_workers, split="train")
    return int(worker_config.rank), int(worker_config.world_size)


def save_datamodule_state(datamodule: Any, folder: str | os.PathLike) -> Path:
    """Save this DP rank's training-loader state under ``folder`` (with its fingerprint).

    Context-parallel (and tensor/pipeline) peers of a DP rank hold the same state; they may
    all call this (the file is written atomically) or only one of them.
    """
    rank, world = _dp_rank_and_size(datamodule)
    state = datamodule.train_dataloader().save_state()
    fingerprint = loader_fingerprint(datamodule, dp_rank=rank, dp_world_size=world)
    return save_loader_state(folder, state, dp_rank=rank, fingerprint=fingerprint)


def load_datamodule_state(datamodule: Any, folder: str | os.PathLike) -> None:
    """Restore this DP rank's training-loader state from ``folder`` (before iterating).

    Raises:
        StateMismatchError: the state was saved with a different world size, dataset, task
            encoder or batch setting; the message names each difference.
    """
    rank, world = _dp_rank_and_size(datamodule)
    fingerprint = loader_fingerprint(datamodule, dp_rank=rank, dp_world_size=world)
    try:
        state = load_loader_state(folder, dp_rank=rank, fingerprint=fingerprint)
    except FileNotFoundError:
        _explain_missing_rank(folder, rank, fingerprint)
        raise
    datamodule.train_dataloader().restore_state(state)


def _explain_missing_rank(
    folder: str | os.PathLike, rank: int, fingerprint: Mapping[str, Any]
) -> None:
    """No file for ``rank``: if another rank's file exists, say how its setup differs."""
    import torch

    present = sorted(Path(folder).glob("train_dataloader_dprank*.pt"))
    if not present:
        return
    payload = torch.load(present[0], map_location="cpu", weights_only=False)
    saved = dict(payload.get("fingerprint", {})) if isinstance(payload, dict) else {}
    saved.pop("dp_rank", None)
    current = {k: v for k, v in fingerprint.items() if k != "dp_rank"}
    differences = fingerprint_differences(saved, current)
    if differences:
        raise StateMismatchError(
            f"no loader state for DP rank {rank} in {folder} (present: "
            f"{', '.join(p.name for p in present)}); the states there were saved by a different "
            "setup. Differences: " + "; ".join(differences)
        )
