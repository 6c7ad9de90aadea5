"""Saving and loading loader states per data-parallel rank, with a check that they fit.

A state file ``train_dataloader_dprank{NNN}.pt`` is what Megatron-Bridge writes too: a
``torch.save`` of ``{"dataloader_state_dict": state}``, here with a ``format`` number and a
*fingerprint* of what produced the state (world size, dataset, task encoder, batch and packing
settings...). Bridge's ``maybe_load_dataloader_state`` reads these files as they are; ours read
Bridge's. Files are read with a restricted unpickler (:mod:`energon_plugins.loading.safe_load`),
never with ``weights_only=False``. Restoring into a different setup would silently replay or
skip data, so loading compares the fingerprints and names every key that differs.

The fingerprint holds only short, plain values: plugin names, option dumps, numbers, and
digests of the extra Energon arguments (never the ``repr()`` of a config value).
"""

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_plugins.errors import EnergonPluginsError
from energon_plugins.loading.safe_load import StateFileError, load_state_file
from energon_plugins.loading.state_check import check_against_template, check_payload

STATE_FORMAT = 2
"""Version of the file layout (1: ``{"format", "fingerprint", "state"}``, still read)."""
STATE_FILE = "train_dataloader_dprank{rank:03d}.pt"
BRIDGE_STATE_KEY = "dataloader_state_dict"
"""The key Megatron-Bridge's checkpointing stores the loader state under."""
STATE_KEY = "energon"
"""Key of Energon's own state in ``EnergonDataloader.save_state()``'s dict."""

__all__ = [
    "STATE_FILE",
    "STATE_FORMAT",
    "StateFileError",
    "StateMismatchError",
    "dataset_identity",
    "fingerprint_differences",
    "load_datamodule_state",
    "load_loader_state",
    "loader_fingerprint",
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


def state_path(folder: str | os.PathLike, dp_rank: int) -> Path:
    """The state file of ``dp_rank`` under ``folder``."""
    if dp_rank < 0:
        raise ValueError(f"dp_rank must be >= 0, got {dp_rank}")
    return Path(folder) / STATE_FILE.format(rank=dp_rank)


COMPONENT_NAMES: dict[str, str] = {
    "energon_plugins.encoding.packing.strategies.NoPacking": "none",
    "energon_plugins.encoding.packing.strategies.FirstFitDecreasing": "first-fit-decreasing",
    "energon_plugins.encoding.packing.strategies.BestFitDecreasing": "best-fit-decreasing",
    "energon_plugins.encoding.packing.strategies.GreedyKnapsack": "greedy-knapsack",
}
"""Class paths that fingerprints of 0.1.0 recorded for built-in components, and the names
recorded since. A class that moves adds its old path here (old path -> what is recorded
now), so states saved before the move still restore."""

_COMPONENT_KEYS = ("task_encoder", "packing")

ABSENT_MEANS: dict[str, Any] = {"seed": 0}
"""Fingerprint keys added since 0.1.0 -> the value a state saved without them had."""


def _canonical(key: str, value: Any) -> Any:
    if key in _COMPONENT_KEYS and isinstance(value, str):
        return COMPONENT_NAMES.get(value, value)
    return value


def fingerprint_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``key: saved X, now Y`` for every key whose value differs (missing keys included).

    Components recorded by a class path that has since moved or been named
    (:data:`COMPONENT_NAMES`) compare by what is recorded now.
    """
    missing = object()
    lines = []
    for key in sorted(set(saved) | set(current)):
        before = _canonical(key, saved.get(key, ABSENT_MEANS.get(key, missing)))
        now = _canonical(key, current.get(key, ABSENT_MEANS.get(key, missing)))
        if before != now:
            show = lambda v: "(absent)" if v is missing else repr(v)
            lines.append(f"{key}: saved {show(before)}, now {show(now)}")
    return lines


def mismatch_message(where: str, differences: list[str]) -> str:
    """The message of a :class:`StateMismatchError` for ``differences``."""
    return (
        f"{where} was saved by a different setup; restoring it would replay or skip data. "
        "Differences: " + "; ".join(differences)
    )


def state_payload(state: Any, fingerprint: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a state file holds: ``state`` under Megatron-Bridge's key, our format number and
    ``fingerprint`` (left out when None)."""
    payload: dict[str, Any] = {BRIDGE_STATE_KEY: state, "format": STATE_FORMAT}
    if fingerprint is not None:
        payload["fingerprint"] = dict(fingerprint)
    return payload


def save_loader_state(
    folder: str | os.PathLike, state: Any, *, dp_rank: int, fingerprint: Mapping[str, Any]
) -> Path:
    """Write ``state`` and ``fingerprint`` to ``folder``'s file for ``dp_rank``, atomically."""
    import torch

    path = state_path(folder, dp_rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = state_payload(state, fingerprint)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_state_file(path: Path) -> tuple[Any, dict[str, Any] | None]:
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


def read_payload(path: Path) -> tuple[Any, Any, dict[str, Any] | None]:
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
    if not path.exists():
        present = sorted(p.name for p in Path(folder).glob("train_dataloader_dprank*.pt"))
        dangling = " (a symlink to a missing file)" if path.is_symlink() else ""
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


# --------------------------------------------------------------------------- fingerprints
def value_digest(value: Any) -> Any:
    """A short stand-in for ``value`` in a fingerprint.

    Numbers, booleans, ``None`` and short strings stand for themselves; containers become a
    SHA-256 digest of their contents (shared sub-structures are hashed once, so a YAML alias
    bomb costs no more than its text), dataclasses (Energon's ``DatasetSubset``) by their
    fields; anything else (a callable ``part_filter``...) by its type and qualified name.
    Never a ``repr()`` of the value.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str) and len(value) <= 120:
        return value
    return "sha256:" + _digest(value, {}).hex()[:16]


def _digest(value: Any, memo: dict[int, bytes]) -> bytes:
    key = id(value)
    if key in memo:
        return memo[key]
    memo[key] = b"(cycle)"  # a container met again inside itself
    h = hashlib.sha256(type(value).__name__.encode())
    if isinstance(value, Mapping):
        parts = sorted((_digest(k, memo), _digest(v, memo)) for k, v in value.items())
        for k, v in parts:
            h.update(k + v)
    elif isinstance(value, (list, tuple)):
        for item in value:
            h.update(_digest(item, memo))
    elif isinstance(value, (set, frozenset)):
        for item in sorted(_digest(v, memo) for v in value):
            h.update(item)
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        h.update(json.dumps(value).encode() if not isinstance(value, bytes) else value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"{type(value).__module__}.{type(value).__qualname__}".encode())
        for field in dataclasses.fields(value):
            h.update(field.name.encode() + _digest(getattr(value, field.name), memo))
    else:
        cls = type(value)
        name = getattr(value, "__qualname__", cls.__qualname__)
        h.update(f"{getattr(value, '__module__', cls.__module__)}.{name}".encode())
    memo[key] = h.digest()
    return memo[key]


def dataset_identity(path: str | os.PathLike) -> str:
    """What identifies a dataset across mounts: ``.nv-meta/index.uuid``, else a content hash.

    A prepared folder is named by the uuid Energon's prepare wrote (moving the folder keeps
    it); a metadataset YAML by the SHA-256 of its text; a remote URL by itself; anything else
    by its resolved path.
    """
    text = str(path)
    if "://" in text:
        return "url:" + text
    p = Path(path).expanduser()
    uuid_file = p / ".nv-meta" / "index.uuid"
    if uuid_file.is_file():
        return "uuid:" + uuid_file.read_text(encoding="utf-8").strip()
    if p.is_file():
        return "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return "path:" + str(p.resolve())


def _options_dump(options: Any) -> Any:
    if hasattr(options, "model_dump"):
        return options.model_dump(mode="json")
    if isinstance(options, Mapping):
        return {str(k): value_digest(v) for k, v in options.items()}
    return value_digest(options)


def _describe_component(arg: Any, built: Any) -> tuple[str, Any]:
    """``(name, options)`` of a task encoder or packing selection, for the fingerprint."""
    if isinstance(arg, str):
        return arg, None
    if isinstance(arg, Mapping):
        return str(arg.get("name")), _options_dump(arg.get("options"))
    obj = built if built is not None else arg
    if obj is None:
        return "None", None
    cls = type(obj)
    options = getattr(obj, "options", None)
    options = _options_dump(options) if options is not None else None
    path = f"{cls.__module__}.{cls.__qualname__}"
    registered = getattr(cls, "name", None)
    # a built-in component: its registered name, which survives moving the class
    if path in COMPONENT_NAMES:
        return COMPONENT_NAMES[path], options
    if isinstance(registered, str) and path.startswith("energon_plugins."):
        return registered, options
    return path, options


def loader_fingerprint(datamodule: Any, *, dp_rank: int, dp_world_size: int) -> dict[str, Any]:
    """What must match for a saved training-loader state to continue the same stream.

    World size and rank of the data-parallel group, the dataset (see
    :func:`dataset_identity`), the task encoder (plugin name and options, or class) and its
    error policy, sequence length, micro batch size, worker count, data-order seed, shuffle and
    packing settings
    (the strategy and its options, ``carry_over`` included), and digests of the extra
    ``get_train_dataset`` arguments.
    """
    encoder_arg = getattr(datamodule, "_task_encoder_arg", None)
    encoder = datamodule.task_encoder
    name, options = _describe_component(encoder_arg, encoder)
    if encoder_arg is None:
        name = "multimodal"
    packing = getattr(datamodule, "packing", None)
    packing_name, packing_options = _describe_component(packing, None)
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
        "seed": int(getattr(datamodule, "seed", 0)),
        "shuffle_buffer_size": datamodule.shuffle_buffer_size,
        "max_samples_per_sequence": datamodule.max_samples_per_sequence,
        "packing_buffer_size": datamodule.packing_buffer_size,
        "packing": None if packing is None else packing_name,
        "packing_options": packing_options,
        "energon_kwargs": {
            str(k): value_digest(v) for k, v in sorted(getattr(datamodule, "kwargs", {}).items())
        },
    }


# --------------------------------------------------------------------------- datamodule level
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

    ``folder``: a folder of :func:`save_datamodule_state`'s files, a Megatron-Bridge checkpoint
    root or one of its iteration folders (see :mod:`energon_plugins.loading.rank_files`). When
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
