"""A polylithic dataset: crude LLaVA conversations whose images live in a separate store.

:func:`write_polylithic_dataset` writes ``conversations/`` (a prepared crude dataset, ``format:
llava``, each sample a ``json`` part naming its image: ``{"image": "<key>.png", "conversations":
...}``) and ``media/`` (the images, one file each) from a monolithic LLaVA dataset of
:func:`~energon_plugins.synthetic.write_dataset`, which it also returns: the same samples with
their image as a part, to compare batches with. :func:`polylithic_metadataset` writes the
metadataset (v2) whose leaf reads the conversations with the images from an ``aux:`` source
(Energon's auxiliary data sources). Tests and the object-storage benchmark use both.
"""

import contextlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import yaml

CRUDE_LLAVA = "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  format: llava\n"


def write_polylithic_dataset(
    root: Path,
    num_samples: int = 20,
    samples_per_shard: int = 5,
    image_size: tuple[int, int] = (32, 32),
) -> Any:
    """Write ``root/conversations`` and ``root/media`` (see the module); return the synthetic
    kit's :class:`DatasetInfo` of the monolithic twin at ``root/monolithic``."""
    import webdataset as wds
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    from energon_plugins.synthetic import write_dataset

    twin = write_dataset(
        root / "monolithic",
        kind="llava",
        num_samples=num_samples,
        samples_per_shard=samples_per_shard,
        image_size=image_size,
    )
    media, conversations = root / "media", root / "conversations"
    if (conversations / ".nv-meta" / "dataset.yaml").is_file():
        return twin
    media.mkdir(parents=True, exist_ok=True)
    conversations.mkdir(parents=True, exist_ok=True)
    samples: dict[str, dict[str, bytes]] = {}
    for shard in twin.shards:
        with tarfile.open(shard) as tar:
            for member in tar:
                key, _, ext = member.name.partition(".")
                handle = tar.extractfile(member)
                if handle is not None:
                    samples.setdefault(key, {})[ext] = handle.read()
    with contextlib.redirect_stdout(io.StringIO()):
        with wds.ShardWriter(
            str(conversations / "shard-%06d.tar"), maxcount=samples_per_shard, verbose=0
        ) as sink:
            for key, parts in samples.items():
                (media / f"{key}.png").write_bytes(parts["png"])
                record = {"image": f"{key}.png", **json.loads(parts["json"])}
                sink.write({"__key__": key, "json": json.dumps(record).encode()})
        names = sorted(p.name for p in conversations.glob("*.tar"))
        BaseWebdatasetFactory.prepare_dataset(
            conversations,
            names,
            split_parts_ratio=[("train", 0.8), ("val", 0.2)],
            shuffle_seed=None,
            workers=1,
        )
    (conversations / ".nv-meta" / "dataset.yaml").write_text(CRUDE_LLAVA)
    return twin


def polylithic_metadataset(path: Path, leaf: str, aux: dict[str, str]) -> Path:
    """Write a metadataset (v2) at ``path`` whose train and val splits read ``leaf`` with the
    ``aux`` sources; return ``path``."""

    def entry() -> dict[str, Any]:  # a fresh mapping per split: no YAML anchors
        return {"path": leaf, "aux": dict(aux), "subflavors": {"format": "llava"}}

    body = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {"train": entry(), "val": entry()},
    }
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path
