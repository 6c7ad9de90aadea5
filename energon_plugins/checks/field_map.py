"""Whether a prepared dataset's ``field_map`` finds its fields, checked on the first sample.

A ``field_map`` in ``.nv-meta/dataset.yaml`` that names a part the shards do not hold
(``image: jpg`` over ``.png`` parts) or a JSON key they do not have (``context: json[nope]``)
makes Energon fail every sample: each one is logged with its traceback and skipped, and
training stops after 100 in a row with ``FatalSampleError``. :func:`field_map_problems` reads the
first sample of the split from its shard (Python's ``tarfile``, the parts Energon's
``split_field_access`` / ``field_access`` would read, JSON parts decoded) and names the
``field_map`` entry, the dataset and what the sample holds instead, in one paragraph. It also
compares the ``field_map`` keys with the sample type's fields (Energon asserts this when the
loader is built). Imports Energon (the sample type, the field-access helpers).
"""

import dataclasses
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.dataset_check import META_DIR
from energon_plugins.config.dataset_fit import DatasetPart, dataset_parts

FIRST_SAMPLE_LIMIT = 64 * 1024 * 1024
"""Most bytes of parts read for the first sample (a larger one is not checked)."""


def _sample_parts(shard: Path) -> tuple[str, dict[str, Any]] | None:
    """``(key, {part: value})`` of the first sample in ``shard`` (JSON parts decoded), or
    ``None`` when the shard cannot be read (the shard check reports that)."""
    parts: dict[str, Any] = {}
    key = None
    size = 0
    try:
        with tarfile.open(shard, "r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                base = member.name.rsplit("/", 1)[-1]
                this, dot, ext = base.partition(".")
                if not dot:
                    continue
                prefix = member.name[: len(member.name) - len(base)] + this
                if key is None:
                    key = prefix
                elif prefix != key:
                    break
                size += member.size
                if size > FIRST_SAMPLE_LIMIT:
                    return None
                handle = tar.extractfile(member)
                raw = handle.read() if handle is not None else b""
                parts[ext] = _decoded(ext, raw)
    except (OSError, tarfile.TarError):
        return None
    return (key, parts) if key is not None else None


def _decoded(ext: str, raw: bytes) -> Any:
    """A JSON part as its value (others stay bytes: only their presence is checked)."""
    if ext == "json" or ext.endswith(".json"):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _first_shard(part: DatasetPart, split: str) -> Path | None:
    """The first shard of ``split`` in ``part``'s folder that exists (Energon's own reading of
    ``split.yaml`` and the index)."""
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.metadata import WebdatasetMeta

    try:
        meta = WebdatasetMeta.from_config(EPath(part.path), split_part=split)
    except Exception:  # noqa: BLE001 - a split this folder lacks, or metadata Energon reports
        return None
    for shard in meta.shards:
        path = Path(str(shard.path))
        if path.is_file() and shard.count:
            return path
    return None


def _described(value: Any) -> str:
    """What a part holds, for a message: a JSON object's keys, else its type."""
    if isinstance(value, Mapping):
        return "keys " + ", ".join(sorted(map(str, value))[:12])
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return type(value).__name__


def _entry_problem(field: str, access: Any, parts: Mapping[str, Any]) -> str | None:
    """Why the ``field_map`` entry ``field: access`` finds nothing in ``parts`` (``None``: it does)."""
    from megatron.energon.flavors.webdataset.field_access import field_access, split_field_access

    if not isinstance(access, str) or not access.strip():
        return f"{field}: {access!r} is not a field access such as png or json[question]"
    options = split_field_access(access)
    if any(option[0] in parts for option in options):
        try:
            field_access(parts, options)
            return None
        except Exception:  # noqa: BLE001 - Energon's FieldAccessError, a KeyError or an IndexError
            part = next(option[0] for option in options if option[0] in parts)
            return (
                f"{field}: {access!r} finds no such key in the {part} part (it has {_described(parts[part])})"
            )
    return f"{field}: {access!r} names a part the samples do not have (they have: {', '.join(sorted(parts))})"


def _sample_fields(part: DatasetPart) -> tuple[set[str], set[str]] | None:
    """``(all fields, required fields)`` of ``part``'s sample type (``None``: not importable,
    or not a dataclass; the dataset-fit check reports that)."""
    import importlib

    try:
        sample_type = getattr(importlib.import_module(part.module), part.cls)
        fields = dataclasses.fields(sample_type)
    except Exception:  # noqa: BLE001
        return None
    names = {f.name for f in fields if not f.name.startswith("__")}
    required = {
        f.name
        for f in fields
        if not f.name.startswith("__")
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    }
    return names, required


def field_map_problems(path: str | Path, split: str = "train") -> list[str]:
    """What is wrong with the ``field_map`` of each prepared folder behind ``path`` (a folder or
    a metadataset's ``split``), one paragraph per folder (empty: nothing found).

    Folders with crude samples or a ``sample_loader`` instead of a ``field_map`` are left alone,
    and so are remote (``msc://``) folders: their first shard is not downloaded here (a wrong
    ``field_map`` there shows as skipped samples when ``validate`` reads the first samples).
    """
    problems = []
    for part in dataset_parts(path, split=split):
        if part.crude or "://" in str(part.path):
            continue
        meta = Path(part.path) / META_DIR / "dataset.yaml"
        try:
            field_map = (yaml.safe_load(meta.read_text(encoding="utf-8")) or {}).get("field_map")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if not isinstance(field_map, Mapping):
            continue
        found = []
        fields = _sample_fields(part)
        if fields is not None:
            names, required = fields
            unknown = sorted(str(k) for k in field_map if k not in names)
            missing = sorted(required - set(map(str, field_map)))
            if unknown:
                found.append(
                    f"maps {', '.join(unknown)}, which {part.cls} has no field for (its fields: {', '.join(sorted(names))})"
                )
            if missing:
                found.append(f"does not map {', '.join(missing)}, which {part.cls} requires")
        shard = _first_shard(part, split) if not found else None
        sample = _sample_parts(shard) if shard is not None else None
        if shard is not None and sample is not None:
            key, parts = sample
            entries = [_entry_problem(str(k), v, parts) for k, v in field_map.items()]
            wrong = [e for e in entries if e is not None]
            if wrong:
                found.append(f"on sample {key} of {shard.name}: " + "; ".join(wrong))
        if found:
            problems.append(
                f"the field_map in {meta} does not fit the dataset {str(part.path)!r}: "
                + "; ".join(found)
                + "; every sample would be skipped: fix the field_map in that file"
            )
    return problems


def check_field_map(path: str | Path, split: str = "train") -> None:
    """Raise :class:`~energon_plugins.errors.DatasetError` naming every
    :func:`field_map_problems` of ``path`` (nothing for a remote path)."""
    from energon_plugins.config.dataset_check import is_remote
    from energon_plugins.errors import DatasetError

    if is_remote(path):
        return
    problems = field_map_problems(path, split)
    if problems:
        raise DatasetError("; ".join(problems))
