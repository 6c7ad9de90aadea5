"""What a saved loader state records of the setup that saved it, and how two such records differ.

A *fingerprint* holds only short, plain values: world size and rank of the data-parallel group,
the dataset's identity, plugin names and option dumps, numbers, and digests of the extra Energon
arguments (never the ``repr()`` of a config value). :func:`fingerprint_differences` names every
key that differs between the fingerprint of a saved state and the restoring loader's
(:mod:`~energon_plugins.loading.checkpoint` refuses a state whose fingerprint differs).
"""

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ABSENT_MEANS",
    "COMPONENT_NAMES",
    "dataset_identity",
    "fingerprint_differences",
    "loader_fingerprint",
    "mismatch_message",
    "value_digest",
]

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

ABSENT_MEANS: dict[str, Any] = {"seed": 0, "blend_schedule": False}
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
    """The message of a :class:`~energon_plugins.loading.checkpoint.StateMismatchError` for
    ``differences``."""
    return (
        f"{where} was saved by a different setup; restoring it would replay or skip data. "
        "Differences: " + "; ".join(differences)
    )


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
    error policy, sequence length, micro batch size, worker count, data-order seed, whether the
    blend follows a schedule, shuffle and
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
        # whether the blend counts its draws (the stages themselves may change on resume)
        "blend_schedule": bool(getattr(datamodule, "blend_schedule", ())),
        "shuffle_buffer_size": datamodule.shuffle_buffer_size,
        "max_samples_per_sequence": datamodule.max_samples_per_sequence,
        "packing_buffer_size": datamodule.packing_buffer_size,
        "packing": None if packing is None else packing_name,
        "packing_options": packing_options,
        "energon_kwargs": {
            str(k): value_digest(v) for k, v in sorted(getattr(datamodule, "kwargs", {}).items())
        },
    }
