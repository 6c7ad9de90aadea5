"""Where each row of a collated batch came from: the ``__sources__`` of the Megatron formats.

Energon gives every sample ``__sources__`` (its ``SourceInfo``: dataset path, index, shard,
file names); a collated batch holds them all in one flat tuple, row after row. A row's
``__key__`` is its sample's key (a packed row's keys joined by commas), and a webdataset
sample's files are named ``KEY.EXT``, so each sub-sample is matched to the first of the
remaining ``SourceInfo`` entries whose files carry its key (aux media and joined parts, which
follow their sample, are passed over). When names do not match and there is exactly one
entry per sub-sample, entries are taken in order.

The loader (:mod:`energon_plugins.loading.source_stats`) knows how the metadataset YAML
wrote each dataset's path: it sets :data:`ROW_SOURCES` on the batch before the format runs.
A batch without it names each source by its dataset path.
"""

from typing import Any

ROW_SOURCES = "_row_sources"
"""The batch attribute the loader sets: per row, the source of each sub-sample, in order."""

UNKNOWN = "unknown"
"""The source of a sub-sample whose ``SourceInfo`` cannot be found."""


def row_sub_keys(batch: Any) -> list[list[str]]:
    """The sub-sample keys of every row (a packed row's ``__key__`` split at commas)."""
    keys = batch.__key__
    rows = int(batch.input_ids.shape[0])
    if not isinstance(keys, (list, tuple)):
        keys = [keys] * rows
    return [str(k).split(",") for k in keys]


def _carries(info: Any, key: str) -> bool:
    names = getattr(info, "file_names", None) or ()
    return any(str(name) == key or str(name).startswith(key + ".") for name in names)


def sub_sample_infos(batch: Any) -> list[list[Any]]:
    """Per row, the ``SourceInfo`` of each sub-sample (``None`` where none is found)."""
    rows = row_sub_keys(batch)
    infos = list(getattr(batch, "__sources__", None) or ())
    flat_keys = [key for row in rows for key in row]
    found: list[Any] = []
    cursor = 0
    for key in flat_keys:
        match = next((i for i in range(cursor, len(infos)) if _carries(infos[i], key)), None)
        if match is None:
            found.append(None)
            continue
        found.append(infos[match])
        cursor = match + 1
    if any(info is None for info in found) and len(infos) == len(flat_keys):
        found = infos  # one entry per sub-sample, names that do not follow the key
    out: list[list[Any]] = []
    start = 0
    for row in rows:
        out.append(found[start : start + len(row)])
        start += len(row)
    return out


def dataset_name(info: Any) -> str:
    """A ``SourceInfo``'s dataset path as text (:data:`UNKNOWN` for ``None``)."""
    if info is None:
        return UNKNOWN
    return str(getattr(info, "dataset_path", UNKNOWN))


def sub_sample_sources(batch: Any) -> list[list[str]]:
    """Per row, the source of each sub-sample: what the loader set (:data:`ROW_SOURCES`), else
    each dataset's path."""
    given = getattr(batch, ROW_SOURCES, None)
    if given is not None:
        return [list(row) for row in given]
    return [[dataset_name(info) for info in row] for row in sub_sample_infos(batch)]


def row_sources(batch: Any) -> list[str]:
    """The ``__sources__`` of a Megatron format: one string per row, a packed row's sources
    (one per sub-sample, in order) joined by commas."""
    return [",".join(row) for row in sub_sample_sources(batch)]
