"""Write and prepare one real Energon dataset offline: :func:`write_dataset`.

Each dataset is a set of webdataset tar shards written with `webdataset.ShardWriter`, indexed
with Energon's own prepare API (`BaseWebdatasetFactory.prepare_dataset`), and described by a
`.nv-meta/dataset.yaml`. The content comes from :mod:`energon_plugins.synthetic.content`;
:class:`DatasetInfo` records what was written so tests can compare.

Kinds (all decoded by Energon's default decoder, so images arrive as CHW float tensors):

- ``vqa``: ``VQASample`` (image, context = question, answers = [answer]); field_map.
- ``captioning``: ``CaptioningSample`` (image, caption); field_map.
- ``interleaved``: ``InterleavedSample`` (sequence of str and image tensors). A field_map
  cannot build a list from several tar parts, so the dataset carries a
  ``.nv-meta/sample_loader.py`` (Energon's documented alternative to a field_map).
- ``llava``: a crude dataset (``CrudeWebdataset``, ``subflavors: {format: llava}``); each
  sample has ``png`` (one image) and ``json`` = ``{"conversations": [{"from": "human",
  "value": "<image>\\n..."}, {"from": "gpt", "value": "..."}, ...]}``.
- ``chatml``: a crude dataset (``subflavors: {format: chatml}``) with one or more images
  ``0.png``, ``1.png``, ... and the same ``json`` conversations; the human turns hold as many
  ``<image>`` tags as the sample has images, in order.

How a task encoder cooks the crude kinds: Energon hands the task encoder a ``CrudeSample``
(a dict) whose parts are already decoded: ``sample["json"]`` is the parsed dict,
``sample["png"]`` (llava) or ``sample["0.png"]``, ``sample["1.png"]``, ... (chatml) are CHW
float tensors, and ``sample["__subflavors__"]["format"]`` is ``"llava"`` or ``"chatml"``.
Register a cooker per format, for example::

    from megatron.energon import Cooker, DefaultTaskEncoder, basic_sample_keys, stateless

    @stateless
    def cook_llava(sample: dict) -> MySample:
        return MySample(**basic_sample_keys(sample), image=sample["png"],
                        conversations=sample["json"]["conversations"])

    class MyEncoder(DefaultTaskEncoder):
        cookers = [Cooker(cook_llava, has_subflavors={"format": "llava"})]


Corruption (``corrupt=``) is described in :mod:`energon_plugins.synthetic.corrupt`.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
from collections.abc import Mapping, Sequence

from energon_plugins.synthetic.cache import (
    STAMP_NAME,
    STAMP_VERSION,
    clear_dataset_dir,
    reusable_info,
    write_stamp,
)
from energon_plugins.synthetic.content import make_sample
from energon_plugins.synthetic.corrupt import corrupt_samples, truncate_shard
from energon_plugins.synthetic.info import DatasetInfo
from energon_plugins.synthetic.validation import validate_args

_SAMPLE_LOADER = '''\
"""Energon sample loader for the interleaved demo dataset (written by energon_plugins.demo).

The `json` part lists the sequence: {"text": str} items and {"image": "<n>.png"} items that
name an image part of the same sample (already decoded to a CHW tensor by Energon).
"""


def sample_loader(raw: dict) -> dict:
    sequence = []
    for item in raw["json"]["sequence"]:
        if "text" in item:
            sequence.append(item["text"])
        else:
            sequence.append(raw[item["image"]])
    return dict(sequence=sequence)


def part_filter(part: str) -> bool:
    return part == "json" or part.endswith(".png")
'''


def _dataset_yaml(kind: str) -> tuple[str, str | None]:
    """The dataset.yaml text for a kind, plus the sample_loader.py text when one is needed."""
    if kind == "vqa":
        return (
            "sample_type:\n  __module__: megatron.energon\n  __class__: VQASample\n"
            "field_map:\n  image: png\n  context: json[question]\n  answers: json[answers]\n",
            None,
        )
    if kind == "captioning":
        return (
            "sample_type:\n  __module__: megatron.energon\n  __class__: CaptioningSample\n"
            "field_map:\n  image: png\n  caption: json[caption]\n",
            None,
        )
    if kind == "interleaved":
        return (
            "sample_type:\n  __module__: megatron.energon\n  __class__: InterleavedSample\n"
            "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n",
            _SAMPLE_LOADER,
        )
    return (
        f"__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  format: {kind}\n",
        None,
    )


def _split_keys(path: pathlib.Path, shard_keys: dict[str, list[str]]) -> dict[str, list[str]]:
    """Read Energon's split.yaml and map each split to its keys in shard order."""
    import braceexpand
    import yaml

    splits = yaml.safe_load((path / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    order = list(shard_keys)
    result: dict[str, list[str]] = {}
    for name, patterns in splits.items():
        names = [n for pattern in patterns for n in braceexpand.braceexpand(pattern)]
        names.sort(key=order.index)
        result[name] = [key for n in names for key in shard_keys[n]]
    return result


def write_dataset(
    path,
    *,
    kind: str = "vqa",
    num_samples: int = 100,
    samples_per_shard: int = 10,
    split_ratio: Sequence[tuple[str, float]] = (("train", 0.8), ("val", 0.2)),
    image_size: tuple[int, int] | tuple[tuple[int, int], tuple[int, int]] = (32, 32),
    seed: int = 0,
    corrupt: Mapping[str, int] | None = None,
    overwrite: bool = False,
) -> DatasetInfo:
    """Write and prepare one Energon dataset of `kind` under `path`; return what was written.

    Splits are assigned per shard (in shard order, no shuffling), so `num_samples /
    samples_per_shard` must give every split at least one shard, or ValueError is raised.
    A directory already holding a dataset written with the same arguments is reused as is;
    one written with other arguments is replaced only with ``overwrite=True``.
    """
    path = pathlib.Path(path).expanduser().resolve()
    split_ratio, sizes, corrupt_map, num_shards = validate_args(
        kind, num_samples, samples_per_shard, split_ratio, image_size, corrupt
    )
    args = {
        "version": STAMP_VERSION,
        "kind": kind,
        "num_samples": num_samples,
        "samples_per_shard": samples_per_shard,
        "split_ratio": [list(x) for x in split_ratio],
        "image_size": [list(sizes[0]), list(sizes[1])],
        "seed": seed,
        "corrupt": {k: corrupt_map[k] for k in sorted(corrupt_map)},
    }
    if not overwrite:
        info = reusable_info(path / ".nv-meta" / STAMP_NAME, args)
        if info is not None:
            return info
    clear_dataset_dir(path, overwrite, path / ".nv-meta" / STAMP_NAME)

    import numpy as np
    import webdataset as wds

    rng = np.random.default_rng(seed)
    samples: dict[str, dict] = {}
    shard_keys: dict[str, list[str]] = {}
    parts_by_key: dict[str, dict[str, bytes]] = {}
    keys = [f"{kind}-{i:06d}" for i in range(num_samples)]
    for key in keys:
        record, parts = make_sample(kind, rng, sizes)
        samples[key] = record
        parts_by_key[key] = parts

    # Choose the corrupt samples among the shards that stay whole.
    truncated = corrupt_map.get("truncated_shard", 0)
    intact_keys = keys[: (num_shards - truncated) * samples_per_shard]
    corrupt_keys = corrupt_samples(kind, rng, intact_keys, parts_by_key, corrupt_map)

    shards_dir = path
    shards_dir.mkdir(parents=True, exist_ok=True)
    pattern = str(shards_dir / "shard-%06d.tar")
    with contextlib.redirect_stdout(io.StringIO()):
        with wds.ShardWriter(pattern, maxcount=samples_per_shard, verbose=0) as sink:
            for key in keys:
                sink.write({"__key__": key, **parts_by_key[key]})
    shards = [shards_dir / f"shard-{i:06d}.tar" for i in range(num_shards)]
    for index, shard in enumerate(shards):
        if not shard.exists():  # pragma: no cover - ShardWriter contract
            raise RuntimeError(f"{shard}: ShardWriter did not write the expected shard")
        shard_keys[shard.name] = keys[index * samples_per_shard : (index + 1) * samples_per_shard]

    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            path,
            [s.name for s in shards],
            split_parts_ratio=split_ratio,
            shuffle_seed=None,
            workers=1,
        )
    dataset_yaml, loader_py = _dataset_yaml(kind)
    (path / ".nv-meta" / "dataset.yaml").write_text(dataset_yaml)
    if loader_py is not None:
        (path / ".nv-meta" / "sample_loader.py").write_text(loader_py)

    if truncated:
        lost: list[str] = []
        for shard in shards[num_shards - truncated :]:
            lost.extend(truncate_shard(shard, shard_keys[shard.name]))
        corrupt_keys["truncated_shard"] = lost

    info = DatasetInfo(
        path=path,
        kind=kind,
        split_keys=_split_keys(path, shard_keys),
        samples=samples,
        shards=shards,
        corrupt_keys=corrupt_keys,
    )
    write_stamp(path / ".nv-meta" / STAMP_NAME, args, info)
    return info
