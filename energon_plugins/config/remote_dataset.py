"""The local dataset checks, for a remote ``msc://PROFILE/...`` dataset.

What :mod:`energon_plugins.config.dataset_check` checks on a local folder, checked here over
multi-storage-client before any loader starts: the profile is defined, the path is reachable
(the bucket exists, the credentials are accepted), ``.nv-meta/dataset.yaml`` and
``.nv-meta/split.yaml`` are there and name the wanted splits (or the metadataset file is there
and names them), and the shards the index names are stored whole. Each problem is one
:class:`~energon_plugins.errors.DatasetError` (or one line of :func:`remote_shard_problems`)
naming the URL, the profile and where the storage client's config came from
(:mod:`energon_plugins.config.remote_storage`), never a credential.

Cost: two or three small reads for the shallow check; the shard check adds one listing of the
folder and an 8-byte ranged read of each of the first :data:`MAX_INDEX_READS` ``.tar.idx``
files (the shards past those are checked for presence only).
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from energon_plugins.config.dataset_check import (
    META_DIR,
    index_problems,
    metadataset_split_names,
    split_part_names,
    split_shard_names,
)
from energon_plugins.config.remote_storage import (
    first_names,
    folder_sizes,
    is_file,
    join_url,
    read_tail,
    read_text,
    storage_client,
    where,
)
from energon_plugins.errors import DatasetError

MAX_INDEX_READS = 64
"""Most ``.tar.idx`` files :func:`remote_shard_problems` reads (8 bytes each) to find shards
cut short; every shard is checked for presence by one listing."""


def _parse(text: str, url: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DatasetError(f"{url}: not valid YAML ({' '.join(str(exc).split())})") from exc


def read_yaml(url: str, what: str, shown: str | None = None) -> Any:
    """The parsed YAML object at ``url`` (``what`` names it in messages, and ``shown`` the URL
    they start with, when not ``url``).

    Raises:
        DatasetError: it is not there, cannot be read or is not YAML.
    """
    text = read_text(url, what, shown)
    if text is None:
        raise DatasetError(f"{shown or url}: {what} does not exist {where(url)}")
    return _parse(text, url)


def remote_dataset_splits(url: str) -> tuple[str, list[str]]:
    """``(kind, split names)`` of the remote dataset at ``url``, as
    :func:`~energon_plugins.config.dataset_check.dataset_splits` for a local path.

    Raises:
        DatasetError: the profile, the bucket or the path cannot be read, or it is not an
            Energon dataset (each naming the URL and the profile).
    """
    url = url.rstrip("/")
    storage_client(url)  # an undefined profile is named with this URL
    if url.endswith((".yaml", ".yml")):
        return "metadataset", metadataset_split_names(read_yaml(url, "the metadataset file"), url)
    if url.endswith(".jsonl"):
        if not is_file(url, "the .jsonl file"):
            raise DatasetError(f"{url}: the .jsonl file does not exist {where(url)}")
        return "jsonl", []
    meta = join_url(url, META_DIR, "dataset.yaml")
    if not is_file(meta, f"{META_DIR}/dataset.yaml", shown=url):
        raise DatasetError(_not_a_dataset(url))
    split_file = join_url(url, META_DIR, "split.yaml")
    text = read_text(split_file, f"{META_DIR}/split.yaml", shown=url)
    if text is None:
        raise DatasetError(f"{url}: {META_DIR}/split.yaml is missing (re-run `energon prepare`) {where(url)}")
    return "webdataset", split_part_names(_parse(text, split_file), split_file)


def _not_a_dataset(url: str) -> str:
    """Why ``url`` has no ``.nv-meta/dataset.yaml``: nothing is stored there, it holds shards
    that were not prepared, or something else (a listing; a missing bucket raises)."""
    names = first_names(url, limit=200)
    if not names:
        return f"{url}: nothing is stored at this path (a typo in the bucket or folder?) {where(url)}"
    if any(name.endswith(".tar") for name in names):
        return (
            f"{url}: not an Energon dataset (no {META_DIR}/dataset.yaml); it holds .tar shards: "
            f"run `energon prepare` on the folder and upload its {META_DIR}/ too {where(url)}"
        )
    return f"{url}: not an Energon dataset (no {META_DIR}/dataset.yaml) {where(url)}"


def check_remote_dataset(url: str, splits: Iterable[str] = ("train",)) -> str:
    """Check that the remote ``url`` is an Energon dataset holding every split in ``splits``;
    return its kind (as :func:`~energon_plugins.config.dataset_check.check_dataset`).

    Raises:
        DatasetError: naming the URL, the profile and the problem.
    """
    kind, have = remote_dataset_splits(url)
    if kind == "jsonl":
        return kind
    for split in splits:
        if split not in have:
            raise DatasetError(
                f"{url}: the {kind} has no {split!r} split (it has: {', '.join(sorted(have)) or 'none'})"
            )
    return kind


def _read_index(url: str) -> dict[str, int] | None:
    """``shard_counts`` of the remote folder's ``.nv-meta/.info.json`` (``None``: no index)."""
    for name, parse in ((".info.json", json.loads), (".info.yaml", yaml.safe_load)):
        file = join_url(url, META_DIR, name)
        text = read_text(file, f"{META_DIR}/{name}")
        if text is None:
            continue
        try:
            data = parse(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise DatasetError(f"{file}: cannot read ({type(exc).__name__}: {exc})") from exc
        counts = data.get("shard_counts") if isinstance(data, Mapping) else None
        if isinstance(counts, Mapping):
            return {str(k): v for k, v in counts.items()}
        raise DatasetError(f"{file}: no 'shard_counts' mapping (re-run `energon prepare`)")
    return None


def remote_shard_problems(url: str, splits: Iterable[str] = ()) -> list[str]:
    """What is wrong with the shards of the remote prepared dataset ``url`` (empty: nothing),
    as :func:`~energon_plugins.config.dataset_check.shard_problems`: every shard the index
    names is stored, the first :data:`MAX_INDEX_READS` are no shorter than their ``.tar.idx``
    says, each split in ``splits`` holds samples."""
    url = url.rstrip("/")
    counts = _read_index(url)
    if counts is None:
        return []
    sizes = _shard_sizes(url, counts)
    missing = [name for name in counts if name not in sizes]
    truncated = []
    for name in [n for n in counts if n in sizes][:MAX_INDEX_READS]:
        index = f"{name}.idx"
        tail = read_tail(join_url(url, index), sizes.get(index, 0), 8) if index in sizes else None
        end = int.from_bytes(tail, "little") if tail else None
        if end is not None and sizes[name] < end:
            truncated.append(f"{name} ({sizes[name]} bytes, its .tar.idx says {end})")
    problems = index_problems(url, missing, truncated)
    if splits:
        split_file = join_url(url, META_DIR, "split.yaml")
        data = _parse(read_text(split_file, f"{META_DIR}/split.yaml") or "{}", split_file)
        for split in splits:
            names = split_shard_names(data, split)
            if names and not any(counts.get(name) for name in names):
                problems.append(f"{url}: the {split!r} split holds no samples (its shards are empty)")
    return [f"{problem} {where(url)}" for problem in problems]


def _shard_sizes(url: str, counts: Mapping[str, int]) -> dict[str, int]:
    """``{name: size}`` of the shards (and their ``.tar.idx``) under ``url``: one listing per
    folder the index's shard names are in."""
    sizes: dict[str, int] = {}
    for folder in sorted({name.rpartition("/")[0] for name in counts}):
        found = folder_sizes(join_url(url, folder) if folder else url)
        sizes.update({f"{folder}/{name}" if folder else name: size for name, size in found.items()})
    return sizes


def remote_dataset_problem(url: str) -> str | None:
    """Why the remote ``url`` is not an Energon dataset with a ``train`` split, or ``None``: as
    :func:`energon_plugins.config.validate.dataset_path_problem` for a local path (the dataset,
    then the shards of every prepared folder behind it)."""
    from energon_plugins.config.dataset_check import shard_problems
    from energon_plugins.config.dataset_fit import dataset_parts

    try:
        kind = check_remote_dataset(url, ("train",))
        if kind == "webdataset":
            have = remote_dataset_splits(url)[1]
            problems = remote_shard_problems(url, [s for s in ("train", "val") if s in have])
        elif kind == "metadataset":
            problems = [p for part in dataset_parts(url) for p in shard_problems(part.path)]
        else:
            problems = []
    except DatasetError as exc:
        return str(exc)
    return "; ".join(problems) or None
