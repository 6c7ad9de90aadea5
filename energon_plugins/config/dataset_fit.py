"""Whether a task encoder can read a dataset, checked before any loader or worker starts.

Energon finds out late: a crude dataset without a matching cooker fails with a bare
``AssertionError`` when the loader is built (or, with a cooker for other subflavors, on every
sample), and a sample type the encoder does not handle fails inside a worker. Here the
dataset's own metadata (``.nv-meta/dataset.yaml``, and every dataset a metadataset names) is
compared with what the encoder declares: its ``cookers`` for crude data, and its
``supported_sample_types`` (when it declares them) for typed samples; a leaf's ``aux:`` sources
are checked too (:mod:`energon_plugins.config.aux_sources`). Remote (``msc://``) folders and
metadatasets are read over the storage client.
"""

import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.aux_sources import aux_problems
from energon_plugins.config.blend_walk import leaf_places
from energon_plugins.config.dataset_check import META_DIR
from energon_plugins.config.remote_storage import is_msc, join_url, parent_url
from energon_plugins.errors import DatasetError

CRUDE = "CrudeWebdataset"


@dataclasses.dataclass(frozen=True)
class DatasetPart:
    """One prepared dataset folder as a split sees it: its sample type and subflavors, and the
    auxiliary sources its metadataset entry names (``aux: {name: path or URL}``, as written)."""

    path: "Path | str"
    module: str
    cls: str
    subflavors: Mapping[str, Any]
    aux: Mapping[str, str] = dataclasses.field(default_factory=dict)
    source: "Path | str | None" = None

    @property
    def meta_file(self) -> str:
        """Where the folder's ``dataset.yaml`` is (a path or an ``msc://`` URL)."""
        if is_msc(self.path):
            return join_url(str(self.path), META_DIR, "dataset.yaml")
        return str(Path(self.path) / META_DIR / "dataset.yaml")

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


def _folder_part(folder: "Path | str", subflavors: Mapping[str, Any]) -> DatasetPart:
    if is_msc(folder):
        from energon_plugins.config.remote_dataset import read_yaml

        meta: Path | str = join_url(str(folder), META_DIR, "dataset.yaml")
        data = read_yaml(
            str(meta), f"{META_DIR}/dataset.yaml (not a prepared Energon dataset?)", shown=str(folder)
        )
    else:
        meta = Path(folder) / META_DIR / "dataset.yaml"
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


def _leaf_target(raw: str, source: "Path | str") -> "Path | str | None":
    """Where a metadataset ``source``'s ``path: raw`` points (``None``: a URL not checked here);
    relative paths resolve against ``source``'s folder, as Energon resolves them."""
    if is_msc(raw):
        return raw
    if "://" in raw:
        return None
    if is_msc(source) and not raw.startswith(("/", "~")):  # Energon: an absolute path is local
        return join_url(parent_url(str(source)), raw)
    target = Path(raw).expanduser()
    target = target if target.is_absolute() else Path(source).parent / target
    if not target.exists():
        raise DatasetError(
            f"the metadataset {str(source)!r} names path {raw!r}, which does not exist ({target})"
        )
    return target


def _metadataset_parts(
    node: Any, source: "Path | str", subflavors: Mapping[str, Any], seen: set[str]
) -> Iterator[DatasetPart]:
    """Every dataset folder under a node of the metadataset ``source`` (``path`` entries,
    blends, nested YAML); relative paths resolve against ``source``'s folder."""
    if isinstance(node, list):
        for item in node:
            yield from _metadataset_parts(item, source, subflavors, seen)
        return
    if not isinstance(node, Mapping):
        return
    here = {**subflavors, **(node.get("subflavors") or {})}
    raw = node.get("path")
    target = _leaf_target(raw, source) if isinstance(raw, str) else None
    if target is not None:
        aux = node.get("aux")
        for part in dataset_parts(target, here, seen=seen):
            if isinstance(aux, Mapping) and part.path == target:
                part = dataclasses.replace(part, aux={str(k): str(v) for k, v in aux.items()}, source=source)
            yield part
    for key, value in node.items():
        if key not in ("path", "subflavors", "aux") and isinstance(value, (Mapping, list)):
            yield from _metadataset_parts(value, source, here, seen)


def dataset_parts(
    path: str | Path,
    subflavors: Mapping[str, Any] | None = None,
    *,
    split: str | None = None,
    seen: set[str] | None = None,
) -> list[DatasetPart]:
    """The prepared folders behind ``path`` (a folder, or a metadataset YAML's ``split``), local
    or ``msc://`` (read over the storage client).

    ``.jsonl`` files and URLs of other schemes are left out: nothing can be read cheaply.

    Raises:
        DatasetError: a folder or YAML file the metadata names cannot be read.
    """
    seen = set() if seen is None else seen
    subflavors = dict(subflavors or {})
    if is_msc(path):
        url = str(path).rstrip("/")
        if url in seen:
            return []
        seen.add(url)
        if url.endswith(".jsonl"):
            return []
        if url.endswith((".yaml", ".yml")):
            from energon_plugins.config.remote_dataset import read_yaml

            return _split_parts(read_yaml(url, "the metadataset file"), url, subflavors, split, seen)
        return [_folder_part(url, subflavors)]
    p = Path(path).expanduser()
    if str(p.resolve()) in seen:
        return []
    seen.add(str(p.resolve()))
    if p.is_dir():
        return [_folder_part(p, subflavors)]
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return _split_parts(_read_yaml(p), p, subflavors, split, seen)
    return []


def _split_parts(
    data: Any, source: "Path | str", subflavors: Mapping[str, Any], split: str | None, seen: set[str]
) -> list[DatasetPart]:
    """The parts of a parsed metadataset ``source``: of ``split``, or of every split."""
    splits = data.get("splits") if isinstance(data, Mapping) else None
    if not isinstance(splits, Mapping):
        return []
    nodes = [splits[split]] if split is not None and split in splits else list(splits.values())
    return list(_metadataset_parts(nodes, source, subflavors, seen))


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
    the encoder's ``supported_sample_types`` when it declares them (``None``: not checked). A
    metadataset's leaf is named with its place in the YAML (``blend.yaml: splits.train.blend[1]``).
    """
    name = type(encoder).__name__
    problems = []
    top: Path | str = str(path).rstrip("/") if is_msc(path) else Path(path).expanduser()
    places = leaf_places(path, split) if str(path).endswith((".yaml", ".yml")) else {}
    for part in dataset_parts(path, split=split):
        where = f"{part.path} ({split} split" + (f" of {top})" if part.path != top else ")")
        place = places.get(str(part.path) if is_msc(part.path) else str(Path(part.path).resolve()))
        where += f" at {place}" if place else ""
        problems += aux_problems(encoder, part, where)
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
                f"{part.meta_file} names the sample type {part.type_name}, "
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
