"""Saving and loading loader states per data-parallel rank, with a check that they fit.

A state file ``train_dataloader_dprank{NNN}.pt`` is what Megatron-Bridge writes too: a
``torch.save`` of ``{"dataloader_state_dict": state}``, here with a ``format`` number and a
*fingerprint* of what produced the state (world size, dataset, task encoder, batch and packing
settings...; :mod:`~energon_plugins.loading.fingerprint`). Bridge's ``maybe_load_dataloader_state``
reads these files as they are; ours read Bridge's. Files are read with a restricted unpickler
(:mod:`energon_plugins.loading.safe_load`), never with ``weights_only=False``. Restoring into a
different setup would silently replay or skip data, so loading compares the fingerprints and
names every key that differs.

A folder may be local or on an object store (``msc://PROFILE/bucket/...``): every file goes
through :mod:`~energon_plugins.loading.state_store`, which writes atomically either way.
"""

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_plugins.errors import EnergonPluginsError
from energon_plugins.loading.fingerprint import (
    ABSENT_MEANS,
    COMPONENT_NAMES,
    dataset_identity,
    fingerprint_differences,
    loader_fingerprint,
    mismatch_message,
    value_digest,
)
from energon_plugins.loading.safe_load import StateFileError, load_state_file
from energon_plugins.loading.state_check import check_against_template, check_payload
from energon_plugins.loading.state_store import StatePath, exists, location, matching_names, write_atomic

STATE_FORMAT = 2
"""Version of the file layout (1: ``{"format", "fingerprint", "state"}``, still read)."""
STATE_FILE = "train_dataloader_dprank{rank:03d}.pt"
BRIDGE_STATE_KEY = "dataloader_state_dict"
"""The key Megatron-Bridge's checkpointing stores the loader state under."""
STATE_KEY = "energon"
"""Key of Energon's own state in ``EnergonDataloader.save_state()``'s dict."""

__all__ = [
    "ABSENT_MEANS",
    "COMPONENT_NAMES",
    "STATE_FILE",
    "STATE_FORMAT",
    "StateFileError",
    "StateMismatchError",
    "dataset_identity",
    "fingerprint_differences",
    "load_datamodule_state",
    "load_loader_state",
    "loader_fingerprint",
    "mismatch_message",
    "save_datamodule_state",
    "save_loader_state",
    "state_path",
    "value_digest",
]


class LoaderStateError(EnergonPluginsError, RuntimeError):
    """The loader state was restored at a point where it can no longer take effect."""


class StateMismatchError(EnergonPluginsError, ValueError):
    """A saved loader state was made by a different setup than the one restoring it."""


def unwrap(state: Any) -> Any:
    """``state`` without a Megatron-Bridge file payload around it."""
    if isinstance(state, dict) and BRIDGE_STATE_KEY in state and STATE_KEY not in state:
        return state[BRIDGE_STATE_KEY]
    return state


def state_path(folder: str | os.PathLike, dp_rank: int) -> StatePath:
    """The state file of ``dp_rank`` under ``folder`` (a local folder or ``msc://`` URL)."""
    if dp_rank < 0:
        raise ValueError(f"dp_rank must be >= 0, got {dp_rank}")
    return location(folder) / STATE_FILE.format(rank=dp_rank)


def state_payload(state: Any, fingerprint: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a state file holds: ``state`` under Megatron-Bridge's key, our format number and
    ``fingerprint`` (left out when None)."""
    payload: dict[str, Any] = {BRIDGE_STATE_KEY: state, "format": STATE_FORMAT}
    if fingerprint is not None:
        payload["fingerprint"] = dict(fingerprint)
    return payload


def state_file_bytes(state: Any, fingerprint: Mapping[str, Any] | None) -> bytes:
    """The bytes of a state file holding ``state`` and ``fingerprint`` (``torch.save`` of
    :func:`state_payload`), serialized whole before anything is written."""
    import torch

    buffer = io.BytesIO()
    torch.save(state_payload(state, fingerprint), buffer)
    return buffer.getvalue()


def save_loader_state(
    folder: str | os.PathLike, state: Any, *, dp_rank: int, fingerprint: Mapping[str, Any]
) -> StatePath:
    """Write ``state`` and ``fingerprint`` to ``folder``'s file for ``dp_rank``, atomically: the
    file is serialized whole first, then stored in one step (a local temporary file renamed over
    it, or one ``PUT`` of an ``msc://`` object), so a failure leaves the previous file as it was.

    Raises:
        StateStoreError: the object store refused the write or cannot be reached.
    """
    path = state_path(folder, dp_rank)
    write_atomic(path, state_file_bytes(state, fingerprint))
    return path


def read_state_file(path: StatePath) -> tuple[Any, dict[str, Any] | None]:
    """``(state, fingerprint)`` from a state file of ours (either format) or Megatron-Bridge's
    (``fingerprint`` is ``None`` then).

    Raises:
        StateFileError: the file is not a regular file, is unreadable, truncated, corrupt,
            foreign, of a newer format, or holds no loader state or one with fields of the
            wrong type (see :func:`~energon_plugins.loading.state_check.check_payload`); the
            message names it.
    """
    _, state, fingerprint = read_payload(path)
    return state, fingerprint


def read_payload(path: StatePath) -> tuple[Any, Any, dict[str, Any] | None]:
    """``(payload, state, fingerprint)`` of a state file: what :func:`read_state_file` returns,
    with the file's whole payload before them (its ``format``)."""
    payload = load_state_file(path)
    state, fingerprint = check_payload(
        payload, str(path), state_key=BRIDGE_STATE_KEY, newest_format=STATE_FORMAT
    )
    return payload, state, fingerprint


def load_loader_state(
    folder: str | os.PathLike,
    *,
    dp_rank: int,
    fingerprint: Mapping[str, Any] | None = None,
) -> Any:
    """Read the state of ``dp_rank`` from ``folder``; check it against ``fingerprint``.

    Raises:
        FileNotFoundError: no state file for this rank (the message lists the ones present).
        StateFileError: the path is not a regular file, or the file is truncated, corrupt or
            not a loader state.
        StateMismatchError: the state was saved by a different setup; names what differs.
    """
    path = state_path(folder, dp_rank)
    if not exists(path):
        present = matching_names(path.parent, "train_dataloader_dprank*.pt")
        dangling = " (a symlink to a missing file)" if isinstance(path, Path) and path.is_symlink() else ""
        raise FileNotFoundError(
            f"no loader state for DP rank {dp_rank}: {path} does not exist{dangling}"
            f" (present: {', '.join(present) or 'none'})"
        )
    state, saved = read_state_file(path)
    if fingerprint is not None and saved is not None:
        differences = fingerprint_differences(saved, fingerprint)
        if differences:
            raise StateMismatchError(mismatch_message(str(path), differences))
    return state


# --------------------------------------------------------------------------- datamodule level
def _dp_rank_and_size(datamodule: Any) -> tuple[int, int]:
    loader = getattr(datamodule, "train_dataloader_object", None)
    worker_config = getattr(getattr(loader, "dataloader", None), "worker_config", None)
    if worker_config is None:
        worker_config = datamodule._build_worker_config(datamodule.num_workers, split="train")
    return int(worker_config.rank), int(worker_config.world_size)


def save_datamodule_state(datamodule: Any, folder: str | os.PathLike) -> StatePath:
    """Save this DP rank's training-loader state under ``folder`` (with its fingerprint), a local
    folder or an ``msc://`` URL, atomically (see :func:`save_loader_state`).

    Context-parallel (and tensor/pipeline) peers of a DP rank hold the same state; they may
    all call this (the file is written atomically) or only one of them.
    """
    rank, world = _dp_rank_and_size(datamodule)
    state = datamodule.train_dataloader().save_state()
    fingerprint = loader_fingerprint(datamodule, dp_rank=rank, dp_world_size=world)
    return save_loader_state(folder, state, dp_rank=rank, fingerprint=fingerprint)


def load_datamodule_state(datamodule: Any, folder: str | os.PathLike) -> None:
    """Restore this DP rank's training-loader state from ``folder`` (before iterating).

    ``folder``: a folder of :func:`save_datamodule_state`'s files, a Megatron-Bridge checkpoint
    root or one of its iteration folders (see :mod:`energon_plugins.loading.rank_files`), local
    or an ``msc://`` URL. When
    this rank's file records the current number of DP ranks and workers, only that file is read;
    otherwise (or when this rank has no file) every rank's file is read and this rank restores
    its share of them (``restore_state`` of the list: another number of GPUs or workers).

    Raises:
        StateMismatchError: the state was saved with a different world size, dataset, task
            encoder, batch or packing setting; the message names each difference. Or the
            files of another number of ranks or workers do not make one complete set or cannot
            feed this run's ranks x workers; the message names the file or the limit.
        StateFileError: the file is not a regular file, is truncated, corrupt, not a loader
            state, or its state does not have the shape of this loader's (its chain of Energon
            datasets or a field's type differ: ``StateShapeError``).
    """
    from energon_plugins.loading.rank_files import find_rank_files, restore_every_rank, saved_size

    rank, world = _dp_rank_and_size(datamodule)
    fingerprint = loader_fingerprint(datamodule, dp_rank=rank, dp_world_size=world)
    found = find_rank_files(folder)
    own = found.paths.get(rank)
    if own is None:
        if not found.paths:
            load_loader_state(found.folder, dp_rank=rank)  # raises: names what is there
        restore_every_rank(datamodule, found, rank, fingerprint)
        return
    state, saved = read_state_file(own)
    inner = state.get("fingerprint") if isinstance(state, dict) else None
    size = saved_size(state, saved or inner)
    now = (world, int(datamodule.num_workers))
    if (size is not None and size != now) or (size is None and len(found.paths) != world):
        restore_every_rank(datamodule, found, rank, fingerprint)
        return
    if saved is not None:
        differences = fingerprint_differences(saved, fingerprint)
        if differences:
            raise StateMismatchError(mismatch_message(str(own), differences))
    where = str(own)
    loader = datamodule.train_dataloader()
    if isinstance(state, dict) and "layout" in state and loader.layout is not None:
        _become_partitioned(loader, state, where)
    if not (isinstance(state, dict) and state.get(STATE_KEY) is None and "partition_states" in state):
        # (a state written by ``checkpoint redistribute`` has no Energon part to compare yet)
        check_against_template(_energon_part(state), _energon_part(loader.save_state()), where)
    restore_named(loader, state, where)


def _become_partitioned(loader: Any, state: dict[str, Any], where: str) -> None:
    """Make ``loader`` the partitioned loader ``state`` was saved by (the template its Energon
    part is compared with); what it restores is left to ``restore_state``.

    Raises:
        StateFileError: ``state["layout"]`` is not a layout (names ``where``).
    """
    from energon_plugins.loading.elastic import Layout

    try:
        Layout.from_saved(state["layout"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StateFileError(
            f"{where!r}: state['layout'] is not a layout ({type(exc).__name__}: {exc})"
        ) from exc
    loader.take_saved_layout(state)


def restore_named(loader: Any, state: Any, where: str) -> None:
    """``loader.restore_state(state)``, a failure of Energon's named as ``where``'s."""
    try:
        loader.restore_state(state)
    except EnergonPluginsError:
        raise
    except (TypeError, ValueError, AttributeError, LookupError, AssertionError, RuntimeError) as exc:
        text = " ".join(str(exc).split())[:200]
        raise StateFileError(
            f"{where!r} does not restore into this loader: {type(exc).__name__}: {text}"
        ) from exc


def _energon_part(state: Any) -> Any:
    """Energon's own state inside ``state`` (``save_state()``'s dict or a bare one), or None."""
    from megatron.energon.savable_loader import SavableDataLoaderState

    if isinstance(state, dict) and STATE_KEY in state:
        state = state[STATE_KEY]
    return state if isinstance(state, SavableDataLoaderState) else None


def datamodule_state_dict(datamodule: Any) -> dict[str, Any]:
    """The training loader's state as ``{"dataloader_state": ...}`` (``{}`` before the loader
    is built): what the datamodule's ``state_dict()`` returns. The state carries its loader's
    fingerprint."""
    loader = getattr(datamodule, "train_dataloader_object", None)
    if loader is None:
        return {}
    return {"dataloader_state": loader.save_state()}


def load_datamodule_state_dict(datamodule: Any, state: Mapping[str, Any]) -> None:
    """Restore the training loader from :func:`datamodule_state_dict` (before iterating it)."""
    if "dataloader_state" in state:
        datamodule.train_dataloader().restore_state(state["dataloader_state"])
