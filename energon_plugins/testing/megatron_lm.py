"""Hand-written datasets of Megatron-LM's sample types, read back by Energon's own loader.

:func:`write_megatron_lm_dataset` writes webdataset shards of ``OCRSample``,
``MultiChoiceVQASample``, ``SimilarityInterleavedSample`` or ``TextSample`` records, indexes
them with Energon's prepare API and writes a ``.nv-meta/dataset.yaml`` with a sample loader,
so each sample reaches a task encoder as Energon builds it from disk.
"""

import json
import pathlib
from collections.abc import Sequence
from typing import Any

from energon_plugins.testing.crude import png_bytes, write_prepared_shards

#: Sample type -> the field its images fill (``image``: the first one; ``images``: all).
IMAGE_FIELDS = {
    "OCRSample": "image",
    "MultiChoiceVQASample": "image",
    "SimilarityInterleavedSample": "images",
    "TextSample": None,
}

_SAMPLE_LOADER = '''\
"""Energon sample loader of a Megatron-LM sample-type dataset (energon_plugins.testing).

The `json` part holds the sample's fields; its images are the parts 0.png, 1.png, ...
"""

IMAGE_FIELD = {image_field!r}


def sample_loader(raw: dict) -> dict:
    fields = dict(raw["json"])
    names = sorted((k for k in raw if k.endswith(".png")), key=lambda k: int(k.split(".")[0]))
    if IMAGE_FIELD == "image":
        fields["image"] = raw[names[0]]
    elif IMAGE_FIELD == "images":
        fields["images"] = [raw[name] for name in names]
    return fields


def part_filter(part: str) -> bool:
    return part == "json" or part.endswith(".png")
'''


def write_megatron_lm_dataset(
    path: Any,
    sample_type: str,
    records: Sequence[dict[str, Any]],
    *,
    samples_per_shard: int = 4,
    split_ratio: Sequence[tuple[str, float]] = (("train", 1.0),),
) -> list[pathlib.Path]:
    """Write ``records`` as a prepared Energon dataset of ``sample_type``.

    Args:
        path: the dataset directory (created).
        sample_type: ``OCRSample``, ``MultiChoiceVQASample``, ``SimilarityInterleavedSample``
            or ``TextSample``.
        records: ``{"__key__": unique key, "images": [PIL images], FIELD: value, ...}``; the
            other fields (``text``, ``words_boxes``, ``context``, ``choices``,
            ``correct_choice_idx``, ``texts``, ``matched_text_indices``, ...) are stored as JSON
            and become the sample's fields.
        samples_per_shard, split_ratio: as in :func:`write_crude_dataset` (splits by shard).

    Returns:
        The shard paths.

    Raises:
        ValueError: an unknown ``sample_type``.
    """
    if sample_type not in IMAGE_FIELDS:
        raise ValueError(f"sample_type: {sample_type!r} is not one of {', '.join(IMAGE_FIELDS)}")
    tar_records = []
    for record in records:
        fields = {k: v for k, v in record.items() if k not in ("__key__", "images")}
        parts: dict[str, Any] = {"__key__": record["__key__"], "json": json.dumps(fields).encode()}
        for i, image in enumerate(record.get("images", ())):
            parts[f"{i}.png"] = png_bytes(image)
        tar_records.append(parts)
    root = pathlib.Path(path)
    shards = write_prepared_shards(
        root, tar_records, samples_per_shard=samples_per_shard, split_ratio=split_ratio
    )
    meta = root / ".nv-meta"
    (meta / "sample_loader.py").write_text(_SAMPLE_LOADER.format(image_field=IMAGE_FIELDS[sample_type]))
    (meta / "dataset.yaml").write_text(
        f"sample_type:\n  __module__: megatron.energon\n  __class__: {sample_type}\n"
        "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n"
    )
    return shards
