"""Checks that a path is an Energon dataset with the wanted splits (import-light: PyYAML only).

These run before any loader or worker is built, so a typo in a path fails in the main process
with one message naming the path and the split.
"""

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.errors import DatasetError

META_DIR = ".nv-meta"


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
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError(f"dataset path {str(path)!r} does not exist")
    if p.is_file():
        if p.suffix == ".jsonl":
            return "jsonl", []
        if p.suffix in (".yaml", ".yml"):
            data = _load_yaml(p)
            if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
                raise DatasetError(f"{p}: not an Energon metadataset (a YAML file with a 'splits' mapping)")
            return "metadataset", [str(k) for k in data["splits"]]
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
    data = _load_yaml(split_file)
    parts = data.get("split_parts") if isinstance(data, dict) else None
    if not isinstance(parts, dict):
        raise DatasetError(f"{split_file}: no 'split_parts' mapping")
    return "webdataset", [str(k) for k, v in parts.items() if v]


def check_dataset(path: str | Path, splits: Iterable[str] = ("train",)) -> str:
    """Check that ``path`` is an Energon dataset holding every split in ``splits``.

    Returns the dataset kind (see :func:`dataset_splits`).

    Raises:
        DatasetError: naming the path and the missing split, and listing the splits it has.
    """
    kind, have = dataset_splits(path)
    if kind == "jsonl":
        return kind
    for split in splits:
        if split not in have:
            raise DatasetError(
                f"{path}: the {kind} has no {split!r} split (it has: {', '.join(sorted(have)) or 'none'})"
            )
    return kind


@contextlib.contextmanager
def energon_dataset_errors(path: str | Path) -> Iterator[None]:
    """Turn Energon's errors about a dataset's description (a metadataset or ``dataset.yaml``
    it cannot parse, an empty dataset) into a :class:`DatasetError` naming ``path``."""
    from megatron.energon.flavors.webdataset.empty_dataset_error import EmptyDatasetError
    from megatron.energon.typed_converter import JsonValueError

    try:
        yield
    except (JsonValueError, EmptyDatasetError) as exc:
        text = " ".join(str(exc).split())
        raise DatasetError(
            f"{path}: Energon cannot load this dataset: {text} (check the metadataset / "
            ".nv-meta/dataset.yaml against Energon's documented format)"
        ) from exc


def is_remote(path: "str | Path") -> bool:
    """Whether ``path`` is a URL Energon opens itself (``msc://profile/...``, ``s3://...``):
    it cannot be checked locally, so Energon reports problems when the loader is built."""
    return "://" in str(path)
