"""What a loader state file holds, checked before anything restores from it.

:func:`check_payload` checks the envelope a state file of ours (or Megatron-Bridge's) holds: a
``dict`` with the loader state under ``dataloader_state_dict``, a known ``format`` number, a
fingerprint of plain values; the loader state (what ``EnergonDataloader.save_state`` returns,
or Energon's bare ``SavableDataLoaderState``) with the types Energon's state classes declare,
nested no deeper than :data:`MAX_STATE_DEPTH`.

:func:`check_against_template` compares a saved state with the state the restoring loader
itself saves before its first batch: the same chain of Energon datasets (``__class__`` and
keys of every level) and, wherever the fresh state has a value, one of the same type. Energon
assigns restored fields without checking them, so a field of the wrong type would otherwise
surface as a ``TypeError`` deep inside a loader worker, batches later.

Every walk here is iterative: a deeply nested or self-referencing pickle cannot exhaust the
stack.
"""

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from energon_plugins.loading.safe_load import StateFileError

MAX_STATE_DEPTH = 100
"""Deepest nesting of containers a loader state may have (a real one nests about 30 deep)."""

PLAIN_SCALARS = (str, bytes, int, float, bool, type(None))
"""The leaf values a fingerprint may hold."""


class StateShapeError(StateFileError):
    """A loader state does not have the shape of the restoring loader's state: another chain of
    Energon datasets (a different setup), or a field of another type (a tampered file)."""


LATER_FIELDS = {"SkipCountingDataset": frozenset({"_source_stats"})}
"""Savable fields added to the project's own stages after 0.1.0: a saved state may lack them
(the stage then restores them as zero)."""


def _children(value: Any) -> list[tuple[str, Any]]:
    """``(label, child)`` of a container or Energon state object."""
    if isinstance(value, Mapping):
        return [(f"[{key!r}]", child) for key, child in value.items()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [(f"[{index}]", child) for index, child in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f".{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    return []


def walk(value: Any, root: str, where: str) -> Iterator[tuple[str, Any, int]]:
    """Every ``(path, value, depth)`` under ``value`` (paths start with ``root``), each object
    expanded once (a cycle ends there).

    Raises:
        StateFileError: the nesting is deeper than :data:`MAX_STATE_DEPTH` (names ``where``).
    """
    seen: set[int] = set()
    stack = [(root, value, 0)]
    while stack:
        path, node, depth = stack.pop()
        if depth > MAX_STATE_DEPTH:
            raise StateFileError(
                f"{where!r} is not a loader state: it nests deeper than {MAX_STATE_DEPTH} levels "
                f"(at {path[:120]})"
            )
        yield path, node, depth
        children = _children(node)
        if children and id(node) not in seen:
            seen.add(id(node))
            stack.extend((path + label, child, depth + 1) for label, child in reversed(children))


def check_payload(payload: Any, where: str, *, state_key: str, newest_format: int) -> tuple[Any, Any]:
    """``(state, fingerprint)`` of a state file's payload, once its envelope checks out.

    Accepts ``{state_key: state, "format": N, "fingerprint": {...}}`` (``format`` and
    ``fingerprint`` optional, as Megatron-Bridge writes none) and format 1's
    ``{"format": 1, "fingerprint": {...}, "state": state}``. The fingerprint is ``None`` when
    the file has none.

    Raises:
        StateFileError: the payload is not such a dict, its ``format`` is unknown (a newer
            version's file), its fingerprint is not a mapping of plain values, or the state
            has fields of the wrong type; the message names ``where``.
    """
    for _ in walk(payload, "payload", where):
        pass  # bounds the depth before anything else looks inside
    if not isinstance(payload, dict) or not (state_key in payload or "state" in payload):
        what = (
            f"a dict with keys {sorted(map(str, payload))[:8]}"
            if isinstance(payload, dict)
            else type(payload).__name__
        )
        raise StateFileError(
            f"{where!r} holds no loader state (expected a dict with {state_key!r}, as "
            f"save_checkpoint and Megatron-Bridge write; got {what})"
        )
    version = payload.get("format", None if state_key in payload else 1)
    if version is not None and (type(version) is not int or not 1 <= version <= newest_format):
        newer = type(version) is int and version > newest_format
        raise StateFileError(
            f"{where!r} has state format {version!r:.40}"
            + (
                f", written by a newer energon-plugins; this version reads formats 1 to {newest_format}"
                if newer
                else f"; known formats are 1 to {newest_format}"
            )
        )
    if state_key not in payload and version != 1:
        raise StateFileError(f"{where!r} holds no loader state under {state_key!r}")
    fingerprint = payload.get("fingerprint")
    _check_fingerprint(fingerprint, where, "fingerprint")
    state = payload[state_key] if state_key in payload else payload["state"]
    check_loader_state(state, where)
    return state, (dict(fingerprint) if fingerprint is not None else None)


def _check_fingerprint(fingerprint: Any, where: str, label: str) -> None:
    if fingerprint is None:
        return
    if not isinstance(fingerprint, dict) or not all(isinstance(k, str) for k in fingerprint):
        raise StateFileError(
            f"{where!r} has a {label} of type {type(fingerprint).__name__}; expected a mapping of "
            "names to plain values"
        )
    for path, value, _ in walk(fingerprint, label, where):
        if not isinstance(value, (*PLAIN_SCALARS, dict, list, tuple)):
            raise StateFileError(f"{where!r}: {path} holds a {type(value).__name__}, not a plain value")


def check_loader_state(state: Any, where: str) -> None:
    """Check the types of a loader state (see the module docstring); other states pass.

    Raises:
        StateFileError: a field of ``save_state()``'s dict or of Energon's state classes has
            the wrong type; the message names ``where`` and the field.
    """
    from megatron.energon.savable_loader import SavableDataLoaderState

    if isinstance(state, dict) and "energon" in state:
        _check_fingerprint(state.get("fingerprint"), where, "state['fingerprint']")
        counts = state.get("skip_counts")
        if counts is not None and not (
            isinstance(counts, dict)
            and all(
                isinstance(worker, (int, str))
                and isinstance(per_reason, dict)
                and all(isinstance(r, str) and type(n) is int and n >= 0 for r, n in per_reason.items())
                for worker, per_reason in counts.items()
            )
        ):
            raise StateFileError(
                f"{where!r}: state['skip_counts'] must map workers to {{reason: count}}, got "
                f"{type(counts).__name__} {counts!r:.80}"
            )
        state = state["energon"]
        if state is not None and not isinstance(state, SavableDataLoaderState):
            raise StateFileError(
                f"{where!r}: state['energon'] is a {type(state).__name__}, not Energon's "
                "SavableDataLoaderState"
            )
    if isinstance(state, SavableDataLoaderState):
        _check_declared_types(state, where)


def _check_declared_types(state: Any, where: str) -> None:
    """Every Energon state object under ``state`` holds values of its declared field types."""
    for path, value, _ in walk(state, "state", where):
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            continue
        hints = typing.get_type_hints(type(value))
        for field in dataclasses.fields(value):
            if not hasattr(value, field.name):
                raise StateFileError(
                    f"{where!r}: {path} ({type(value).__name__}) lacks its field {field.name!r}"
                )
            got = getattr(value, field.name)
            if not _conforms(got, hints.get(field.name, Any)):
                raise StateFileError(
                    f"{where!r}: {path}.{field.name} is a {type(got).__name__} ({got!r:.60}); "
                    f"{type(value).__name__} declares {_show(hints.get(field.name))}"
                )


def _conforms(value: Any, annotation: Any) -> bool:
    """Whether ``value`` fits ``annotation`` at its top level (and list items' types)."""
    if annotation is Any or isinstance(annotation, typing.TypeVar):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        return any(_conforms(value, arg) for arg in typing.get_args(annotation))
    if origin in (list, tuple, dict, set):
        if not isinstance(value, origin):
            return False
        args = typing.get_args(annotation)
        if origin is list and args:
            return all(_conforms(item, args[0]) for item in value)
        return True
    if annotation is type(None):
        return value is None
    if isinstance(annotation, type):
        if annotation is int:
            return type(value) is int
        if annotation is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        return isinstance(value, annotation)
    return True


def _show(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


# --------------------------------------------------------------------------- against the loader
def check_against_template(saved: Any, template: Any, where: str) -> None:
    """Compare the Energon state ``saved`` with ``template``, what the restoring loader saves
    before its first batch (see the module docstring). A ``template`` of ``None`` (a loader with
    workers, before its first batch) passes anything.

    Raises:
        StateShapeError: another chain of Energon datasets (``__class__`` or keys differ), a
            different number of wrapped datasets, or a value of another type where the fresh
            state has one; the message names ``where`` and the path.
    """
    if template is None:
        return  # a loader with workers saves no state before its first batch: nothing to compare
    if saved is None:
        raise StateShapeError(
            f"{where!r} holds no Energon loader state, where this loader (without workers) always "
            "saves one: it was saved by another setup or is not a loader state"
        )
    stack: list[tuple[str, Any, Any, int]] = [("state", saved, template, 0)]
    seen: set[tuple[int, int]] = set()
    while stack:
        path, value, model, depth = stack.pop()
        if model is None or (id(value), id(model)) in seen:
            continue
        seen.add((id(value), id(model)))
        if depth > MAX_STATE_DEPTH:
            raise StateShapeError(f"{where!r}: the state nests deeper than {MAX_STATE_DEPTH} levels")
        problem = _type_difference(value, model)
        if problem is not None:
            raise StateShapeError(f"{where!r} does not fit this loader: {path} {problem}")
        if isinstance(model, Mapping):
            if "__class__" in model:
                if value.get("__class__") != model["__class__"]:
                    raise StateShapeError(
                        f"{where!r} was saved by a different setup: {path} is Energon's "
                        f"{value.get('__class__')!r:.60} where this loader has {model['__class__']!r}"
                    )
                later = LATER_FIELDS.get(str(model["__class__"]), frozenset()) & set(model)
                if set(value) | later != set(model):
                    extra, missing = (
                        sorted(map(str, set(value) - set(model))),
                        sorted(set(model) - set(value)),
                    )
                    raise StateShapeError(
                        f"{where!r} does not fit this loader: {path} ({model['__class__']}) has "
                        f"unexpected keys {extra[:5]} and lacks {missing[:5]}"
                    )
            stack.extend((f"{path}[{k!r}]", value[k], model[k], depth + 1) for k in model if k in value)
        elif isinstance(model, (list, tuple)):
            if path.endswith("['datasets']") and len(value) != len(model):
                raise StateShapeError(
                    f"{where!r} was saved by a different setup: {path} wraps {len(value)} datasets "
                    f"where this loader wraps {len(model)}"
                )
            same_length = len(value) == len(model)
            if same_length:
                stack.extend((f"{path}[{i}]", v, m, depth + 1) for i, (v, m) in enumerate(zip(value, model)))
            unmodelled = [v for i, v in enumerate(value) if not same_length or model[i] is None]
            problem = _sibling_difference(unmodelled, allow_none=same_length and len(model) > 0)
            if problem is not None:
                raise StateShapeError(f"{where!r} does not fit this loader: {path} {problem}")
        elif dataclasses.is_dataclass(model):
            hints = typing.get_type_hints(type(model))
            for f in dataclasses.fields(model):
                field_value = getattr(value, f.name, None)
                if field_value is None and _conforms(None, hints.get(f.name, Any)):
                    continue  # a declared Optional left empty
                stack.append((f"{path}.{f.name}", field_value, getattr(model, f.name, None), depth + 1))


def _sibling_difference(items: list[Any], *, allow_none: bool) -> str | None:
    """How the items of a list that the fresh state leaves empty disagree among themselves
    (``None``: they do not). Energon's lists (restore keys, slice states) hold one kind of
    item: every item not ``None`` has the same type, and tuples of the same length hold the
    same types at each position (``None`` matches anything). ``None`` items themselves are
    allowed only where the fresh state has them (``allow_none``: free slots of a fixed-size
    list), not in a list the fresh state holds empty (a buffer's restore keys)."""
    if not allow_none and any(item is None for item in items):
        return "holds an empty (None) item where this loader keeps only filled ones"
    present = [item for item in items if item is not None]
    kinds = {type(item) for item in present}
    if len(kinds) > 1:
        names = sorted(kind.__name__ for kind in kinds)
        return f"mixes items of different types ({', '.join(names)}) where this loader keeps one kind"
    positions: dict[tuple[int, int], type] = {}
    for item in present:
        if not isinstance(item, tuple):
            continue
        for index, part in enumerate(item):
            if part is None:
                continue
            kind = bool if isinstance(part, bool) else type(part)
            known = positions.setdefault((len(item), index), kind)
            if known is not kind:
                return (
                    f"holds keys that disagree at position {index}: a {kind.__name__} ({part!r:.40}) "
                    f"where the others have a {known.__name__}"
                )
    return None


def _type_difference(value: Any, model: Any) -> str | None:
    """How ``value``'s type differs from ``model``'s (``None``: it does not)."""
    if isinstance(model, bool) or isinstance(value, bool):
        same = isinstance(value, bool) and isinstance(model, bool)
    elif isinstance(model, int):
        same = type(value) is int
    elif isinstance(model, float):
        same = isinstance(value, (int, float))
    elif isinstance(model, Mapping):
        same = isinstance(value, Mapping)
    else:
        same = type(value) is type(model)
    if same:
        return None
    return f"is a {type(value).__name__} ({value!r:.60}) where this loader has a {type(model).__name__}"


MAX_COUNT = 2**63 - 1
"""The largest count a saved counter may hold (an int64)."""


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _worker_key(key: Any) -> bool:
    return (isinstance(key, int) and not isinstance(key, bool)) or (isinstance(key, str) and key.isdigit())


def count_field_problem(field: str, value: Any) -> str | None:
    """What is wrong with a saved state's ``skip_counts`` or ``source_stats`` (``None``: it is
    absent or well formed): ``{worker: {reason: count}}`` and ``{worker: {source: {counter:
    count, "skipped": {reason: count}}}}``, every count an integer from 0 to 2**63 - 1."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{field} is a {type(value).__name__}, not a mapping of workers"
    for worker, per_worker in value.items():
        where = f"{field}[{worker!r:.40}]"
        if not _worker_key(worker):
            return f"{where}: a worker key must be a non-negative integer"
        if not isinstance(per_worker, Mapping):
            return f"{where} is a {type(per_worker).__name__}, not a mapping"
        for name, entry in per_worker.items():
            if not isinstance(name, str):
                return f"{where}: the key {name!r:.40} is not a string"
            if field == "skip_counts":
                entries: Mapping[Any, Any] = {name: entry}
            elif not isinstance(entry, Mapping):
                return f"{where}[{name!r:.60}] is a {type(entry).__name__}, not a mapping of counters"
            else:
                entries = {k: v for k, v in entry.items() if k != "skipped"}
                skipped = entry.get("skipped") or {}
                if not isinstance(skipped, Mapping) or not all(
                    isinstance(r, str) and _count(n) for r, n in skipped.items()
                ):
                    return f"{where}[{name!r:.60}]['skipped'] is not a mapping of reasons to counts"
            for counter, count in entries.items():
                if not isinstance(counter, str) or not _count(count):
                    return f"{where}: {counter!r:.40} -> {count!r:.40} is not a count (an integer from 0 to 2**63 - 1)"
    return None


def check_count_fields(state: Any, where: str) -> None:
    """Refuse a state whose ``skip_counts`` or ``source_stats`` are not well formed, before
    anything reads them (a tampered or foreign file).

    Raises:
        StateShapeError: names the field and the entry at fault.
    """
    if not isinstance(state, Mapping):
        return
    for field in ("skip_counts", "source_stats"):
        problem = count_field_problem(field, state.get(field))
        if problem is not None:
            raise StateShapeError(f"{where!r} does not fit this loader: {problem}")
