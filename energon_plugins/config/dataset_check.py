"""Checks that a path is an Energon dataset with the wanted splits (import-light: PyYAML only).

These run before any loader or worker is built, so a typo in a path fails in the main process
with one message naming the path and the split. A metadataset must name a metadataset class
Energon has (``__class__: NoSuchMetadataset`` is refused here, naming the file and the class).
:func:`shard_problems` checks what a prepared folder's index (``.nv-meta/.info.json``) promises:
every shard it names is there and no shorter than its ``.tar.idx`` says, and a split holds
samples; it costs a ``stat`` (and an 8-byte read) per shard. An ``msc://PROFILE/...`` URL is
checked the same way over the storage client (:mod:`energon_plugins.config.remote_dataset`).
A metadataset's leaves are walked by :mod:`energon_plugins.config.blend_walk` (two small reads
per leaf): a leaf reached twice, an empty leaf or a bad weight is refused, naming its place.
"""

import contextlib
import importlib.util
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins._suggest import did_you_mean
from energon_plugins.config.remote_storage import is_msc
from energon_plugins.errors import DatasetError

META_DIR = ".nv-meta"

ENERGON_METADATASET_CLASSES = ("MetadatasetV2", "Metadataset")
"""The metadataset classes ``megatron.energon`` has (a test compares with the installed Energon)."""

MAX_SHARDS_NAMED = 3
"""Most missing or truncated shards one message lists by name."""


def _load_yaml(path: Path) -> Any:
    try:
        with path.open("r", encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise DatasetError(f"{path}: not valid YAML ({exc})") from exc
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from exc


def dataset_splits(path: str | Path) -> tuple[str, list[str]]:
    """Return ``(kind, split names)`` of the Energon dataset at ``path``.

    ``kind`` is ``"webdataset"`` (a prepared folder: ``.nv-meta/dataset.yaml`` and
    ``.nv-meta/split.yaml``), ``"metadataset"`` (a YAML file with ``splits``) or ``"jsonl"``
    (a ``.jsonl`` file, whose splits are not known in advance: an empty list).

    Raises:
        DatasetError: the path does not exist or is not an Energon dataset.
    """
    if is_msc(path):
        from energon_plugins.config.remote_dataset import remote_dataset_splits

        return remote_dataset_splits(str(path))
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError(f"dataset path {str(path)!r} does not exist")
    if p.is_file():
        if p.suffix == ".jsonl":
            return "jsonl", []
        if p.suffix in (".yaml", ".yml"):
            return "metadataset", metadataset_split_names(_load_yaml(p), p)
        raise DatasetError(
            f"{p}: not an Energon dataset (expected a prepared dataset folder, a metadataset "
            ".yaml or a .jsonl file)"
        )
    meta = p / META_DIR
    if not (meta / "dataset.yaml").is_file():
        hint = ""
        if any(p.glob("*.tar")):
            hint = f" It holds .tar shards: run `energon prepare {p}` first."
        raise DatasetError(f"{p}: not an Energon dataset (no {META_DIR}/dataset.yaml).{hint}")
    split_file = meta / "split.yaml"
    if not split_file.is_file():
        raise DatasetError(f"{p}: {META_DIR}/split.yaml is missing (re-run `energon prepare`)")
    return "webdataset", split_part_names(_load_yaml(split_file), split_file)


def metadataset_split_names(data: Any, path: "str | Path") -> list[str]:
    """The split names of a parsed metadataset file ``path`` (its class checked too).

    Raises:
        DatasetError: not a mapping with ``splits``, or a class Energon does not have.
    """
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise DatasetError(f"{path}: not an Energon metadataset (a YAML file with a 'splits' mapping)")
    _check_metadataset_class(path, data)
    return [str(k) for k in data["splits"]]


def split_part_names(data: Any, path: "str | Path") -> list[str]:
    """The non-empty splits of a parsed ``.nv-meta/split.yaml`` at ``path``.

    Raises:
        DatasetError: it has no ``split_parts`` mapping.
    """
    parts = data.get("split_parts") if isinstance(data, dict) else None
    if not isinstance(parts, dict):
        raise DatasetError(f"{path}: no 'split_parts' mapping")
    return [str(k) for k, v in parts.items() if v]


def _check_metadataset_class(path: "str | Path", data: Mapping[str, Any]) -> None:
    """Refuse a metadataset whose ``__module__`` / ``__class__`` Energon cannot resolve (checked
    without importing: ``megatron.energon``'s classes are known; another module must be
    installed)."""
    module, cls = data.get("__module__"), data.get("__class__")
    if module is None and cls is None:
        return  # Energon's default class
    if not isinstance(module, str) or not isinstance(cls, str) or not module.strip() or not cls.strip():
        raise DatasetError(
            f"{path}: a metadataset names both __module__ and __class__ as text (e.g. __module__: "
            f"megatron.energon, __class__: MetadatasetV2), got __module__ {module!r}, __class__ {cls!r}"
        )
    known = ", ".join(ENERGON_METADATASET_CLASSES)
    if module == "megatron.energon" or module.startswith("megatron.energon."):
        if cls not in ENERGON_METADATASET_CLASSES:
            raise DatasetError(
                f"{path}: __class__ {cls!r} is not a metadataset class of Energon"
                f"{did_you_mean(cls, ENERGON_METADATASET_CLASSES)} (its metadataset classes: {known})"
            )
        return
    top = module.split(".")[0]
    if cls not in ENERGON_METADATASET_CLASSES and importlib.util.find_spec(top) is None:
        raise DatasetError(
            f"{path}: __module__ {module!r} (of __class__ {cls!r}) is not installed; Energon's "
            f"metadataset classes are {known} in megatron.energon"
        )


def check_dataset(path: str | Path, splits: Iterable[str] = ("train",)) -> str:
    """Check that ``path`` is an Energon dataset holding every split in ``splits``.

    Returns the dataset kind (see :func:`dataset_splits`). A metadataset's blends are checked
    too (:func:`~energon_plugins.config.blend_walk.blend_problems`): every leaf of those splits
    exists and holds samples, none is reached twice, every weight is a number above 0.

    Raises:
        DatasetError: naming the path and the missing split, and listing the splits it has; or
            naming each bad leaf of a metadataset and its place in the YAML.
    """
    kind, have = dataset_splits(path)
    if kind == "jsonl":
        return kind
    splits = list(splits)
    for split in splits:
        if split not in have:
            raise DatasetError(
                f"{path}: the {kind} has no {split!r} split (it has: {', '.join(sorted(have)) or 'none'})"
            )
    if kind == "metadataset":
        from energon_plugins.config.blend_walk import blend_problems

        problems = blend_problems(path, splits)
        if problems:
            raise DatasetError("; ".join(problems))
    return kind


@contextlib.contextmanager
def energon_dataset_errors(path: str | Path) -> Iterator[None]:
    """Turn Energon's errors about a dataset's description into a :class:`DatasetError` naming
    ``path``: a metadataset or ``dataset.yaml`` it cannot parse, an empty dataset, a
    ``__module__`` / ``__class__`` it cannot import (``Object X not found in M``), a
    ``field_map`` that does not fit the sample type (Energon asserts it)."""
    from megatron.energon.flavors.webdataset.empty_dataset_error import EmptyDatasetError
    from megatron.energon.typed_converter import JsonValueError

    try:
        yield
    except (JsonValueError, EmptyDatasetError, ImportError, AssertionError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, ImportError):
            text = f"{type(exc).__name__}: {text} (a __module__ / __class__ it names)"
        raise DatasetError(
            f"{path}: Energon cannot load this dataset: {text} (check the metadataset / "
            ".nv-meta/dataset.yaml against Energon's documented format)"
        ) from exc


def _read_index(folder: Path) -> dict[str, int] | None:
    """``shard_counts`` of ``folder``'s ``.nv-meta/.info.json`` (or the older ``.info.yaml``);
    ``None`` when neither is there or it holds no such mapping."""
    for name, parse in ((".info.json", json.loads), (".info.yaml", yaml.safe_load)):
        file = folder / META_DIR / name
        if file.is_file():
            try:
                data = parse(file.read_text(encoding="utf-8"))
            except (OSError, ValueError, yaml.YAMLError) as exc:
                raise DatasetError(f"{file}: cannot read ({type(exc).__name__}: {exc})") from exc
            counts = data.get("shard_counts") if isinstance(data, Mapping) else None
            if isinstance(counts, Mapping):
                return {str(k): v for k, v in counts.items()}
            raise DatasetError(f"{file}: no 'shard_counts' mapping (re-run `energon prepare {folder}`)")
    return None


def _indexed_end(shard: Path) -> int | None:
    """Where the last sample of ``shard`` ends by its ``.tar.idx`` (the last offset), if any."""
    index = shard.with_name(shard.name + ".idx")
    try:
        with index.open("rb") as fh:
            fh.seek(0, 2)
            if fh.tell() < 8:
                return None
            fh.seek(-8, 2)
            return int.from_bytes(fh.read(8), "little")
    except OSError:
        return None


def _split_shards(folder: Path, split: str) -> list[str] | None:
    """The shard names of ``split`` in ``folder``'s ``split.yaml`` (brace patterns expanded,
    excludes removed); ``None`` when the file cannot say."""
    try:
        data = yaml.safe_load((folder / META_DIR / "split.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return split_shard_names(data, split)


def split_shard_names(data: Any, split: str) -> list[str] | None:
    """The shard names of ``split`` in a parsed ``split.yaml`` (brace patterns expanded,
    excludes removed); ``None`` when it cannot say."""
    import braceexpand  # webdataset's and Energon's own dependency; a small pure-Python module

    try:
        patterns = data["split_parts"][split]
        excluded = {
            name for pattern in data.get("exclude") or () for name in braceexpand.braceexpand(pattern)
        }
        return [n for p in patterns for n in braceexpand.braceexpand(p) if n not in excluded]
    except (KeyError, TypeError, AttributeError):
        return None


def empty_split_reason(split_text: str | None, index_text: str | None, split: str) -> str | None:
    """Why ``split`` of a prepared folder holds no samples, from the texts of its
    ``.nv-meta/split.yaml`` and ``.nv-meta/.info.json`` (``None``: it holds some, or a text
    is missing or unreadable, which the other checks report)."""
    try:
        data = yaml.safe_load(split_text) if split_text is not None else None
        index = json.loads(index_text) if index_text is not None else None
    except (ValueError, yaml.YAMLError):
        return None
    parts = data.get("split_parts") if isinstance(data, Mapping) else None
    if not isinstance(parts, Mapping):
        return None
    if split not in parts:
        return f"it has no {split!r} split (it has: {', '.join(map(str, parts)) or 'none'})"
    names = split_shard_names(data, split)
    if names is not None and not names:
        return f"its {split!r} split lists no shards"
    counts = index.get("shard_counts") if isinstance(index, Mapping) else None
    if names and isinstance(counts, Mapping) and not any(counts.get(name) for name in names):
        return f"the {len(names)} shard(s) of its {split!r} split hold no samples"
    return None


def shard_problems(folder: str | Path, splits: Iterable[str] = ()) -> list[str]:
    """What is wrong with the shards of the prepared dataset ``folder`` (empty: nothing).

    Every shard its index names must exist and be at least as long as its ``.tar.idx`` says
    (a shorter one was cut off: a copy that stopped early); each split in ``splits`` must hold
    at least one sample. A folder without an index is left alone (Energon reports it).
    """
    if is_msc(folder):
        from energon_plugins.config.remote_dataset import remote_shard_problems

        return remote_shard_problems(str(folder), splits)
    root = Path(folder).expanduser()
    counts = _read_index(root)
    if counts is None:
        return []
    missing, truncated = [], []
    for name in counts:
        shard = root / name
        try:
            size = shard.stat().st_size
        except FileNotFoundError:
            missing.append(name)
            continue
        except OSError:
            continue
        end = _indexed_end(shard)
        if end is not None and size < end:
            truncated.append(f"{name} ({size} bytes, its .tar.idx says {end})")
    problems = []
    problems = index_problems(str(root), missing, truncated)
    for split in splits:
        names = _split_shards(root, split)
        if names and not any(counts.get(name) for name in names):
            problems.append(f"{root}: the {split!r} split holds no samples (its shards are empty)")
    return problems


def index_problems(root: str, missing: list[str], truncated: list[str]) -> list[str]:
    """The messages for shards the index names that are ``missing`` or ``truncated``
    (``"NAME (N bytes, its .tar.idx says M)"``) in the dataset folder ``root``."""
    problems = []
    if missing:
        problems.append(
            f"{root}: {_listed(missing)} named in {META_DIR}/.info.json "
            f"{'is' if len(missing) == 1 else 'are'} missing; restore "
            f"{'it' if len(missing) == 1 else 'them'} or re-run `energon prepare {root}`"
        )
    if truncated:
        problems.append(
            f"{root}: {_listed(truncated)} {'is' if len(truncated) == 1 else 'are'} cut short (a copy "
            "that stopped early?); restore the file(s) or re-run `energon prepare`"
        )
    return problems


def _listed(names: list[str]) -> str:
    shown = ", ".join(f"shard {n}" for n in names[:MAX_SHARDS_NAMED])
    more = len(names) - MAX_SHARDS_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def is_remote(path: "str | Path") -> bool:
    """Whether ``path`` is a URL (``msc://profile/...``, ``s3://...``) rather than a local path.
    ``msc://`` URLs are checked over the storage client (:func:`is_checked`); others are left
    to Energon, which reports problems when the loader is built."""
    return "://" in str(path)


def is_checked(path: "str | Path") -> bool:
    """Whether :func:`check_dataset` can check ``path`` before a loader is built: a local path
    or an ``msc://`` URL (:mod:`energon_plugins.config.remote_dataset`)."""
    return not is_remote(path) or is_msc(path)
