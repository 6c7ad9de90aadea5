"""Whether a task encoder can read a dataset, checked before any loader or worker starts.

Energon finds out late: a crude dataset without a matching cooker fails with a bare
``AssertionError`` when the loader is built (or, with a cooker for other subflavors, on every
sample), and a sample type the encoder does not handle fails inside a worker. Here the
dataset's own metadata (``.nv-meta/dataset.yaml``, and every dataset a metadataset names) is
compared with what the encoder declares: its ``cookers`` for crude data, and its
``supported_sample_types`` (when it declares them) for typed samples.
"""

import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.dataset_check import META_DIR
from energon_plugins.errors import DatasetError

CRUDE = "CrudeWebdataset"


@dataclasses.dataclass(frozen=True)
class DatasetPart:
    """One prepared dataset folder as a split sees it: its sample type and subflavors."""

    path: Path
    module: str
    cls: str
    subflavors: Mapping[str, Any]

    @property
    def crude(self) -> bool:
        """Whether the folder holds crude samples (cooked by the task encoder)."""
        return self.cls == CRUDE

    @property
    def type_name(self) -> str:
        """``module.Class`` of the sample type."""
        return f"{self.module}.{self.cls}"


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DatasetError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from exc


def _folder_part(folder: Path, subflavors: Mapping[str, Any]) -> DatasetPart:
    meta = folder / META_DIR / "dataset.yaml"
    if not meta.is_file():
        raise DatasetError(f"{folder}: not a prepared Energon dataset (no {META_DIR}/dataset.yaml)")
    data = _read_yaml(meta)
    if not isinstance(data, Mapping):
        raise DatasetError(f"{meta}: expected a mapping")
    typed = data.get("sample_type")
    described = typed if isinstance(typed, Mapping) else data
    module, cls = described.get("__module__"), described.get("__class__")
    if not isinstance(module, str) or not isinstance(cls, str):
        raise DatasetError(f"{meta}: names no sample type (__module__ / __class__)")
    merged = {**(data.get("subflavors") or {}), **subflavors}
    return DatasetPart(folder, module, cls, merged)


def _metadataset_parts(
    node: Any, source: Path, subflavors: Mapping[str, Any], seen: set[Path]
) -> Iterator[DatasetPart]:
    """Every dataset folder under a node of the metadataset ``source`` (``path`` entries,
    blends, nested YAML); relative paths resolve against ``source``'s folder."""
    base = source.parent
    if isinstance(node, list):
        for item in node:
            yield from _metadataset_parts(item, source, subflavors, seen)
        return
    if not isinstance(node, Mapping):
        return
    here = {**subflavors, **(node.get("subflavors") or {})}
    raw = node.get("path")
    if isinstance(raw, str) and "://" not in raw:
        target = Path(raw).expanduser()
        target = target if target.is_absolute() else base / target
        if not target.exists():
            raise DatasetError(
                f"the metadataset {str(source)!r} names path {raw!r}, which does not exist ({target})"
            )
        yield from dataset_parts(target, here, seen=seen)
    for key, value in node.items():
        if key not in ("path", "subflavors") and isinstance(value, (Mapping, list)):
            yield from _metadataset_parts(value, source, here, seen)


def dataset_parts(
    path: str | Path,
    subflavors: Mapping[str, Any] | None = None,
    *,
    split: str | None = None,
    seen: set[Path] | None = None,
) -> list[DatasetPart]:
    """The prepared folders behind ``path`` (a folder, or a metadataset YAML's ``split``).

    Remote (``msc://``) parts and ``.jsonl`` files are left out: nothing can be read cheaply.

    Raises:
        DatasetError: a folder or YAML file the metadata names cannot be read.
    """
    p = Path(path).expanduser()
    seen = set() if seen is None else seen
    if p.resolve() in seen:
        return []
    seen.add(p.resolve())
    subflavors = dict(subflavors or {})
    if p.is_dir():
        return [_folder_part(p, subflavors)]
    if p.suffix in (".yaml", ".yml") and p.is_file():
        data = _read_yaml(p)
        splits = data.get("splits") if isinstance(data, Mapping) else None
        if not isinstance(splits, Mapping):
            return []
        nodes = [splits[split]] if split is not None and split in splits else list(splits.values())
        return list(_metadataset_parts(nodes, p, subflavors, seen))
    return []


def _import_type(part: DatasetPart) -> type | None:
    """The sample type ``part`` names, resolved as Energon does (a module that is not there
    falls back to ``megatron.energon``); ``None`` when it cannot be found."""
    for module in (part.module, "megatron.energon"):
        try:
            found = getattr(importlib.import_module(module), part.cls, None)
        except Exception:  # noqa: BLE001 - a module that is missing or fails to import
            continue
        if isinstance(found, type):
            return found
    return None


def fit_problems(encoder: Any, path: str | Path, split: str) -> list[str]:
    """Why ``encoder`` cannot read the ``split`` of the dataset at ``path`` (empty: it can).

    Crude folders need a cooker whose subflavors match; typed folders need a sample type among
    the encoder's ``supported_sample_types`` when it declares them (``None``: not checked).
    """
    name = type(encoder).__name__
    problems = []
    top = Path(path).expanduser()
    for part in dataset_parts(path, split=split):
        where = f"{part.path} ({split} split" + (f" of {top})" if part.path != top else ")")
        if part.crude:
            cookers = list(getattr(encoder, "cookers", None) or ())
            if not cookers:
                problems.append(
                    f"{where} holds crude samples (subflavors {dict(part.subflavors)}), "
                    f"but the task encoder {name} has no cookers to turn them into samples; "
                    "select an encoder plugin that reads this format"
                )
            elif not any(_cooker_matches(c, part.subflavors) for c in cookers):
                wanted = [getattr(c, "has_subflavors", None) for c in cookers]
                problems.append(
                    f"{where} holds crude samples with subflavors {dict(part.subflavors)}, "
                    f"but the cookers of {name} read only {wanted}"
                )
            continue
        supported = getattr(encoder, "supported_sample_types", None)
        sample_type = _import_type(part)
        if sample_type is None:
            problems.append(
                f"{part.path / META_DIR / 'dataset.yaml'} names the sample type {part.type_name}, "
                f"which cannot be imported (no class {part.cls!r} in {' or '.join(dict.fromkeys([part.module, 'megatron.energon']))})"
            )
            continue
        if supported is None:
            continue
        if not issubclass(sample_type, tuple(supported)):
            problems.append(
                f"{where} holds {part.cls} samples, which the task encoder {name} does not "
                f"read (it reads {', '.join(t.__name__ for t in supported)}); select an encoder "
                "plugin for this sample type"
            )
    return problems


def _cooker_matches(cooker: Any, subflavors: Mapping[str, Any]) -> bool:
    match = getattr(cooker, "is_match", None)
    return bool(match(dict(subflavors))) if callable(match) else True


def check_fit(encoder: Any, path: str | Path, split: str) -> None:
    """Raise :class:`DatasetError` when ``encoder`` cannot read ``split`` of ``path``."""
    problems = fit_problems(encoder, path, split)
    if problems:
        raise DatasetError("; ".join(problems))
