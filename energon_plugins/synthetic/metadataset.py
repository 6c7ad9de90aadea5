"""The demo's data: a VQA and a captioning dataset blended by one Energon metadataset."""

from __future__ import annotations

import pathlib

from energon_plugins.synthetic.cache import STAMP_VERSION, reusable_info, write_stamp
from energon_plugins.synthetic.info import DatasetInfo
from energon_plugins.synthetic.shards import write_dataset

_DEMO_YAML = """\
# Written by energon_plugins.demo: blends the two demo datasets for training and reads both
# (one after the other) for validation.
__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - weight: 1
        path: vqa
      - weight: 1
        path: captioning
  val:
    blend:
      - weight: 1
        path: vqa
      - weight: 1
        path: captioning
"""


def write_demo_datasets(
    root, *, num_samples: int = 200, seed: int = 0, overwrite: bool = False
) -> DatasetInfo:
    """Write ``root/vqa``, ``root/captioning`` and the metadataset ``root/demo.yaml``.

    Both datasets use 32x32 images, 10 samples per shard and an 80/20 train/val split. A second
    call with the same arguments reuses what is on disk (checked through a stamp file).
    Returns a DatasetInfo whose ``path`` is the metadataset YAML and whose keys, samples and
    shards are the union of both datasets (keys are prefixed by kind, so they are unique).
    """
    root = pathlib.Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    stamp_path = root / "demo-stamp.json"
    args = {"version": STAMP_VERSION, "num_samples": num_samples, "seed": seed}
    if not overwrite and (root / "demo.yaml").exists():
        info = reusable_info(stamp_path, args)
        if info is not None:
            return info
    parts = [
        write_dataset(root / kind, kind=kind, num_samples=num_samples, seed=seed + offset, overwrite=True)
        for offset, kind in enumerate(("vqa", "captioning"))
    ]
    yaml_path = root / "demo.yaml"
    yaml_path.write_text(_DEMO_YAML)
    split_keys: dict[str, list[str]] = {}
    for part in parts:
        for split, keys in part.split_keys.items():
            split_keys.setdefault(split, []).extend(keys)
    info = DatasetInfo(
        path=yaml_path,
        kind="metadataset",
        split_keys=split_keys,
        samples={k: v for part in parts for k, v in part.samples.items()},
        shards=[s for part in parts for s in part.shards],
    )
    write_stamp(stamp_path, args, info)
    return info
