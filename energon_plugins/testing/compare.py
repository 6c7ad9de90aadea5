"""Compare two batches field by field (tensors exactly), for the resume check."""

import dataclasses
from collections.abc import Mapping
from typing import Any

# Energon's bookkeeping fields: the restore key records where a sample came from in *this*
# loader's history, so it legitimately differs between a run and its restored twin.
_IGNORED_FIELDS = frozenset({"__restore_key__"})


def batch_differences(a: Any, b: Any, path: str = "batch", limit: int = 5) -> list[str]:
    """Return up to ``limit`` human-readable differences between ``a`` and ``b`` (none: equal).

    Tensors must match in shape, dtype and every value (``torch.equal``; NaNs in the same
    places count as equal); dataclasses, mappings and sequences are compared member by member.
    """
    out: list[str] = []
    _diff(a, b, path, out, limit)
    return out


def _fields(value: Any) -> dict[str, Any] | None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return dict(value)
    return None


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    import torch

    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)):
            out.append(f"{path}: {type(a).__name__} vs {type(b).__name__}")
        elif a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{path}: shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
        elif not _tensors_equal(a, b):
            where = (a != b).nonzero()
            out.append(
                f"{path}: values differ at {where.shape[0]} position(s), "
                f"first {tuple(where[0].tolist()) if len(where) else '?'}"
            )
        return
    fa, fb = _fields(a), _fields(b)
    if fa is not None or fb is not None:
        if fa is None or fb is None or type(a) is not type(b):
            out.append(f"{path}: {type(a).__name__} vs {type(b).__name__}")
            return
        for key in sorted(set(fa) | set(fb), key=str):
            if key in _IGNORED_FIELDS:
                continue
            if key not in fa or key not in fb:
                out.append(f"{path}.{key}: present in only one")
                continue
            _diff(fa[key], fb[key], f"{path}.{key}", out, limit)
        return
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} vs {len(b)}")
            return
        for index, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{index}]", out, limit)
        return
    try:
        equal = a == b
        equal = bool(equal)
    except Exception:  # noqa: BLE001 - objects without a usable ==: compare their repr
        equal = repr(a) == repr(b)
    if not equal:
        out.append(f"{path}: {a!r} vs {b!r}"[:300])


def _tensors_equal(a: Any, b: Any) -> bool:
    import torch

    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))) and bool(
            torch.equal(torch.isnan(a), torch.isnan(b))
        )
    return bool(torch.equal(a, b))
