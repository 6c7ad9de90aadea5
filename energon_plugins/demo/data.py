"""Write real Energon datasets offline, for the demo, the tests and the plugins.

Each dataset is a set of webdataset tar shards written with `webdataset.ShardWriter`, indexed
with Energon's own prepare API (`BaseWebdatasetFactory.prepare_dataset`), and described by a
`.nv-meta/dataset.yaml`. The content is generated from a seeded numpy RNG and is meaningful
enough to check: images of coloured shapes with questions, captions or conversations about
them. :class:`DatasetInfo` records what was written so tests can compare.

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

Corruption (``corrupt=``): ``{"image": n}`` replaces n images with bytes that are not a PNG;
``{"json": n}`` replaces n JSON parts with text that does not parse; ``{"missing_field": n}``
writes n JSON parts that parse but lack the kind's required field (``REQUIRED_FIELD``): for
vqa, captioning and interleaved Energon's own loader fails on them, for the crude kinds
(llava, chatml) Energon delivers them and the task encoder's cooker must fail;
``{"truncated_shard": n}``
cuts the last n shards in half *after* prepare (at a sample boundary), so the index still
lists the samples of the lost half. The keys affected are in ``DatasetInfo.corrupt_keys``;
every other sample stays readable. Energon 7.4.1 skips the image/json failures through
``WorkerConfig.global_error_handler`` (default: log and skip), but a read past the end of a
truncated shard raises ``ValueError("Unexpected end of tar file: <shard>")`` from the raw
reader, outside the error handler, which ends the iteration: the samples read before it
arrive, the rest of that loader does not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import pathlib
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any

from energon_plugins.demo.images import COLORS, SHAPES, draw_scene

KINDS = ("vqa", "captioning", "interleaved", "llava", "chatml")
CORRUPTIONS = ("image", "json", "missing_field", "truncated_shard")
# The JSON field each kind needs; "missing_field" corruption leaves it out.
REQUIRED_FIELD = {
    "vqa": "question",
    "captioning": "caption",
    "interleaved": "sequence",
    "llava": "conversations",
    "chatml": "conversations",
}
STAMP_NAME = "energon_plugins_demo.json"
_STAMP_VERSION = 1


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What a generator wrote.

    Attributes:
        path: the dataset directory (for :func:`write_demo_datasets`, the metadataset YAML).
        kind: the dataset kind (``"metadataset"`` for :func:`write_demo_datasets`).
        split_keys: split name -> sample ``__key__`` values in that split, in shard order.
        samples: ``__key__`` -> the source record (text fields, image sizes, colours, ...).
        shards: the tar shards, in writing order.
        corrupt_keys: corruption reason (``image``, ``json``, ``truncated_shard``) -> keys.
    """

    path: pathlib.Path
    kind: str
    split_keys: dict[str, list[str]]
    samples: dict[str, dict]
    shards: list[pathlib.Path]
    corrupt_keys: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def good_keys(self) -> set[str]:
        """All keys that are not corrupt."""
        bad = {key for keys in self.corrupt_keys.values() for key in keys}
        return set(self.samples) - bad

    def to_json(self) -> dict:
        """A JSON-serialisable form (used by the reuse stamp)."""
        return {
            "path": str(self.path),
            "kind": self.kind,
            "split_keys": self.split_keys,
            "samples": self.samples,
            "shards": [str(s) for s in self.shards],
            "corrupt_keys": self.corrupt_keys,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DatasetInfo":
        """Inverse of :meth:`to_json`."""
        return cls(
            path=pathlib.Path(data["path"]),
            kind=data["kind"],
            split_keys={k: list(v) for k, v in data["split_keys"].items()},
            samples=dict(data["samples"]),
            shards=[pathlib.Path(s) for s in data["shards"]],
            corrupt_keys={k: list(v) for k, v in data.get("corrupt_keys", {}).items()},
        )


def default_cache_dir() -> pathlib.Path:
    """Where the demo keeps its data: ``$ENERGON_PLUGINS_CACHE`` or ``~/.cache/energon-plugins``."""
    env = os.environ.get("ENERGON_PLUGINS_CACHE")
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path("~/.cache/energon-plugins").expanduser()


# --------------------------------------------------------------------------- validation


def _split_shard_counts(num_shards: int, split_ratio: Sequence[tuple[str, float]]) -> dict[str, int]:
    """Shards per split, computed exactly as Energon's prepare assigns them."""
    total = sum(ratio for _, ratio in split_ratio)
    counts: dict[str, int] = {}
    cumulative = 0.0
    offset = 0
    for name, ratio in split_ratio:
        cumulative += ratio / total
        end = int(num_shards * cumulative)
        counts[name] = end - offset
        offset = end
    return counts


def _validate_args(kind, num_samples, samples_per_shard, split_ratio, image_size, corrupt):
    if kind not in KINDS:
        raise ValueError(f"kind: unknown dataset kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples: must be a positive integer, got {num_samples!r}")
    if not isinstance(samples_per_shard, int) or samples_per_shard < 1:
        raise ValueError(f"samples_per_shard: must be a positive integer, got {samples_per_shard!r}")
    split_ratio = [(str(name), float(ratio)) for name, ratio in split_ratio]
    if not split_ratio:
        raise ValueError("split_ratio: at least one split is needed")
    names = [name for name, _ in split_ratio]
    if len(set(names)) != len(names):
        raise ValueError(f"split_ratio: split names must be unique, got {names}")
    for name, ratio in split_ratio:
        if not ratio > 0:
            raise ValueError(f"split_ratio: split {name!r} has ratio {ratio}; ratios must be > 0")
    num_shards = -(-num_samples // samples_per_shard)
    counts = _split_shard_counts(num_shards, split_ratio)
    empty = [name for name, count in counts.items() if count == 0]
    if empty:
        raise ValueError(
            f"split_ratio: split(s) {', '.join(map(repr, empty))} would be empty: Energon assigns "
            f"whole shards to splits and {num_samples} samples at {samples_per_shard} per shard make "
            f"only {num_shards} shard(s) (shards per split: {counts}). Use more samples or fewer "
            f"samples_per_shard."
        )
    sizes = _parse_image_size(image_size)
    corrupt = dict(corrupt or {})
    for reason, count in corrupt.items():
        if reason not in CORRUPTIONS:
            raise ValueError(
                f"corrupt: unknown corruption {reason!r}; expected one of {', '.join(CORRUPTIONS)}"
            )
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"corrupt[{reason!r}]: must be a non-negative integer, got {count!r}")
    truncated = corrupt.get("truncated_shard", 0)
    if truncated >= num_shards:
        raise ValueError(
            f"corrupt['truncated_shard']: {truncated} shard(s) to truncate leaves no intact shard "
            f"out of {num_shards}"
        )
    intact = (num_shards - truncated) * samples_per_shard
    intact = min(intact, num_samples)
    needed = sum(corrupt.get(r, 0) for r in ("image", "json", "missing_field"))
    if needed > intact:
        raise ValueError(
            f"corrupt: {needed} image/json/missing_field corruptions requested but only {intact} samples lie in "
            f"untruncated shards"
        )
    return split_ratio, sizes, corrupt, num_shards


def _parse_image_size(image_size) -> tuple[tuple[int, int], tuple[int, int]]:
    """Return ((min_w, min_h), (max_w, max_h)) from a fixed (w, h) or a range."""
    try:
        if len(image_size) == 2 and all(isinstance(v, int) for v in image_size):
            w, h = image_size
            lo, hi = (w, h), (w, h)
        else:
            (lw, lh), (hw, hh) = image_size
            lo, hi = (int(lw), int(lh)), (int(hw), int(hh))
    except (TypeError, ValueError):
        raise ValueError(
            f"image_size: expected (w, h) or ((min_w, min_h), (max_w, max_h)), got {image_size!r}"
        ) from None
    if min(lo) < 4 or hi[0] < lo[0] or hi[1] < lo[1]:
        raise ValueError(f"image_size: sizes must be >= 4 pixels and min <= max, got {image_size!r}")
    return lo, hi


# --------------------------------------------------------------------------- content

_PLURAL = {"rectangle": "rectangles", "circle": "circles", "triangle": "triangles"}


def _pick(rng, items):
    return items[int(rng.integers(len(items)))]


def _size(rng, sizes) -> tuple[int, int]:
    (lw, lh), (hw, hh) = sizes
    return int(rng.integers(lw, hw + 1)), int(rng.integers(lh, hh + 1))


def _scene(rng, sizes, *, max_shapes: int = 4, shape: str | None = None):
    """A random scene description plus its PNG bytes."""
    names = list(COLORS)
    background = _pick(rng, names)
    fg = [c for c in names if c != background]
    count = int(rng.integers(1, max_shapes + 1))
    kind = shape or _pick(rng, SHAPES)
    color = _pick(rng, fg)
    shapes = [(kind, color)] * count
    size = _size(rng, sizes)
    png = draw_scene(rng, size, background=background, shapes=shapes)
    scene = {
        "size": list(size),
        "background": background,
        "background_rgb": list(COLORS[background]),
        "shape": kind,
        "color": color,
        "count": count,
    }
    return scene, png


def _qa(rng, scene) -> tuple[str, str]:
    """A question about a scene and its answer."""
    choice = int(rng.integers(3))
    if choice == 0:
        return f"How many {_PLURAL[scene['shape']]} are there?", str(scene["count"])
    if choice == 1:
        return f"What color is the {scene['shape']}?", scene["color"]
    return "What color is the background?", scene["background"]


def _caption(scene) -> str:
    if scene["count"] == 1:
        return f"A {scene['color']} {scene['shape']} on a {scene['background']} background."
    return (
        f"{scene['count']} {scene['color']} {_PLURAL[scene['shape']]} on a "
        f"{scene['background']} background."
    )


def _conversation(rng, scenes: list[dict], *, image_token: str = "<image>") -> list[dict]:
    """1-3 human/gpt turns; the image tags go into the first human turns, one per image."""
    turns = max(int(rng.integers(1, 4)), 1)
    pending = list(range(len(scenes)))
    conversations = []
    for turn in range(turns):
        target = scenes[int(rng.integers(len(scenes)))]
        question, answer = _qa(rng, target)
        if turn == 0 and len(scenes) > 1:
            # all image tags up front, one per image
            tags = "".join(f"{image_token}\n" for _ in pending)
            pending = []
            question = tags + question
        elif turn == 0:
            question = f"{image_token}\n{question}"
            pending = []
        conversations.append({"from": "human", "value": question})
        conversations.append({"from": "gpt", "value": f"{answer[0].upper()}{answer[1:]}."})
    return conversations


def _make_sample(kind: str, rng, sizes) -> tuple[dict, dict[str, bytes]]:
    """Return (record, tar parts without __key__)."""
    if kind == "vqa":
        scene, png = _scene(rng, sizes, shape="rectangle" if rng.integers(2) else None)
        question, answer = _qa(rng, scene)
        record = {"context": question, "answers": [answer], "image_sizes": [scene["size"]],
                  "scenes": [scene]}
        meta = {"question": question, "answers": [answer], "scene": scene}
        return record, {"png": png, "json": json.dumps(meta).encode()}
    if kind == "captioning":
        scene, png = _scene(rng, sizes, max_shapes=3)
        caption = _caption(scene)
        record = {"caption": caption, "image_sizes": [scene["size"]], "scenes": [scene]}
        return record, {"png": png, "json": json.dumps({"caption": caption, "scene": scene}).encode()}
    if kind == "interleaved":
        n_images = int(rng.integers(1, 3))
        parts: dict[str, bytes] = {}
        sequence: list[dict] = []
        scenes = []
        for i in range(n_images):
            scene, png = _scene(rng, sizes, max_shapes=3)
            scenes.append(scene)
            parts[f"{i}.png"] = png
            sequence.append({"text": f"Picture {i + 1}:"})
            sequence.append({"image": f"{i}.png"})
            sequence.append({"text": _caption(scene)})
        record = {"sequence": sequence, "image_sizes": [s["size"] for s in scenes], "scenes": scenes}
        parts["json"] = json.dumps({"sequence": sequence}).encode()
        return record, parts
    if kind == "llava":
        scene, png = _scene(rng, sizes)
        conversations = _conversation(rng, [scene])
        record = {"conversations": conversations, "image_sizes": [scene["size"]], "scenes": [scene]}
        return record, {"png": png, "json": json.dumps({"conversations": conversations}).encode()}
    if kind == "chatml":
        n_images = int(rng.integers(1, 4))
        parts = {}
        scenes = []
        for i in range(n_images):
            scene, png = _scene(rng, sizes)
            scenes.append(scene)
            parts[f"{i}.png"] = png
        conversations = _conversation(rng, scenes)
        record = {"conversations": conversations, "image_sizes": [s["size"] for s in scenes],
                  "scenes": scenes}
        parts["json"] = json.dumps({"conversations": conversations}).encode()
        return record, parts
    raise ValueError(f"kind: unknown dataset kind {kind!r}")  # pragma: no cover


# --------------------------------------------------------------------------- dataset.yaml

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
        "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
        f"subflavors:\n  format: {kind}\n",
        None,
    )


# --------------------------------------------------------------------------- writing


def _read_stamp(path: pathlib.Path) -> dict | None:
    stamp = path / ".nv-meta" / STAMP_NAME
    try:
        return json.loads(stamp.read_text())
    except (OSError, ValueError):
        return None


def _clear_dir(path: pathlib.Path, overwrite: bool, marker: pathlib.Path) -> None:
    """Make `path` an empty directory; delete an old one only when `overwrite` and it is ours."""
    if path.exists() and any(path.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{path}: directory exists with a different dataset; pass overwrite=True to replace it"
            )
        if not marker.exists():
            raise FileExistsError(
                f"{path}: refusing to delete a non-empty directory not written by energon_plugins.demo"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)


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


def _truncate(shard: pathlib.Path, keys: list[str]) -> list[str]:
    """Cut a shard at the header of its middle sample; return the keys that were cut off."""
    with tarfile.open(shard) as tar:
        first_offset: dict[str, int] = {}
        for member in tar.getmembers():
            base = member.name.split(".", 1)[0]
            first_offset.setdefault(base, member.offset)
    cut_index = len(keys) // 2
    offset = first_offset[keys[cut_index]]
    with open(shard, "r+b") as f:
        f.truncate(offset)
    return keys[cut_index:]


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
    split_ratio, sizes, corrupt_map, num_shards = _validate_args(
        kind, num_samples, samples_per_shard, split_ratio, image_size, corrupt
    )
    args = {
        "version": _STAMP_VERSION,
        "kind": kind,
        "num_samples": num_samples,
        "samples_per_shard": samples_per_shard,
        "split_ratio": [list(x) for x in split_ratio],
        "image_size": [list(sizes[0]), list(sizes[1])],
        "seed": seed,
        "corrupt": {k: corrupt_map[k] for k in sorted(corrupt_map)},
    }
    stamp = _read_stamp(path)
    if stamp is not None and stamp.get("args") == args and not overwrite:
        info = DatasetInfo.from_json(stamp["info"])
        if all(s.exists() for s in info.shards):
            return info
    _clear_dir(path, overwrite, path / ".nv-meta" / STAMP_NAME)

    import numpy as np
    import webdataset as wds

    rng = np.random.default_rng(seed)
    samples: dict[str, dict] = {}
    shard_keys: dict[str, list[str]] = {}
    parts_by_key: dict[str, dict[str, bytes]] = {}
    keys = [f"{kind}-{i:06d}" for i in range(num_samples)]
    for key in keys:
        record, parts = _make_sample(kind, rng, sizes)
        samples[key] = record
        parts_by_key[key] = parts

    # Choose the corrupt samples among the shards that stay whole.
    truncated = corrupt_map.get("truncated_shard", 0)
    intact_keys = keys[: (num_shards - truncated) * samples_per_shard]
    picks = list(rng.permutation(len(intact_keys)))
    corrupt_keys: dict[str, list[str]] = {}
    for reason in ("image", "json", "missing_field"):
        n = corrupt_map.get(reason, 0)
        if n:
            chosen = sorted(intact_keys[int(i)] for i in picks[:n])
            picks = picks[n:]
            corrupt_keys[reason] = chosen
            for key in chosen:
                parts = parts_by_key[key]
                if reason == "image":
                    name = next(p for p in parts if p.endswith("png"))
                    parts[name] = b"this is not a PNG file " + key.encode()
                elif reason == "json":
                    parts["json"] = b'{"broken": "json' + key.encode()
                else:
                    meta = json.loads(parts["json"])
                    del meta[REQUIRED_FIELD[kind]]
                    parts["json"] = json.dumps(meta).encode()

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
            lost.extend(_truncate(shard, shard_keys[shard.name]))
        corrupt_keys["truncated_shard"] = lost

    info = DatasetInfo(
        path=path,
        kind=kind,
        split_keys=_split_keys(path, shard_keys),
        samples=samples,
        shards=shards,
        corrupt_keys=corrupt_keys,
    )
    (path / ".nv-meta" / STAMP_NAME).write_text(json.dumps({"args": args, "info": info.to_json()}))
    return info


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


def write_demo_datasets(root, *, num_samples: int = 200, seed: int = 0, overwrite: bool = False) -> DatasetInfo:
    """Write ``root/vqa``, ``root/captioning`` and the metadataset ``root/demo.yaml``.

    Both datasets use 32x32 images, 10 samples per shard and an 80/20 train/val split. A second
    call with the same arguments reuses what is on disk (checked through a stamp file).
    Returns a DatasetInfo whose ``path`` is the metadataset YAML and whose keys, samples and
    shards are the union of both datasets (keys are prefixed by kind, so they are unique).
    """
    root = pathlib.Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    stamp_path = root / "demo-stamp.json"
    args = {"version": _STAMP_VERSION, "num_samples": num_samples, "seed": seed}
    if not overwrite and stamp_path.exists() and (root / "demo.yaml").exists():
        try:
            stamp = json.loads(stamp_path.read_text())
        except ValueError:
            stamp = None
        if stamp and stamp.get("args") == args:
            info = DatasetInfo.from_json(stamp["info"])
            if all(s.exists() for s in info.shards):
                return info
    parts = [
        write_dataset(root / kind, kind=kind, num_samples=num_samples, seed=seed + offset,
                      overwrite=True)
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
    stamp_path.write_text(json.dumps({"args": args, "info": info.to_json()}))
    return info
