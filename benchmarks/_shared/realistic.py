"""Realistic benchmark data, written once and cached: photographs-like JPEGs and real text lengths.

:func:`realistic_dataset` writes a VQA dataset with Energon's own prepare API
(``BaseWebdatasetFactory.prepare_dataset``) under ``results/.cache``: each sample has a JPEG
(quality 90, 4:2:0, like a camera or web photo) whose long side is drawn from 400-1600 px and
whose aspect ratio from 1:1 to 2:1, landscape or portrait, with photograph-like content (a
smooth colour field, mid-frequency texture, edges and sensor noise, so the JPEG entropy and
decode cost are those of photos, about 100-600 KB each), a question of 5-30 words and an answer
of 30-300 words. :func:`saved_tokenizers` trains the offline demo tokenizers (LLaVA and Qwen2
families, with their chat templates and special tokens) on the benchmark's vocabulary and saves
them for ``AutoTokenizer``. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from . import CACHE_DIR as CACHE

VERSION = 1

_WORDS = """
the a an of to in on at by for with from over under near behind beside between above below
man woman child dog cat bird horse car bus train bicycle street road tree trees house window
door table chair plate cup bottle food pizza sandwich apple banana orange cake kitchen room
sky cloud clouds sun light shadow water river lake sea beach sand grass field mountain hill
snow rock stone wall fence sign building city park bench boat ship plane airport station
red green blue yellow white black brown gray orange purple pink dark bright small large tall
short old young wooden metal glass plastic round square long wide narrow open closed empty full
is are was were has have holding sitting standing walking running looking riding eating playing
carrying wearing parked flying floating lying hanging covered filled surrounded made painted
two three four several many some few each every other another both group pair couple row line
left right front back top bottom middle center side corner edge background foreground distance
image picture photo scene view shows appears seems looks there here this that these those it
and or but while as because so then also very quite rather slightly mostly partly near far
what where which how many who why does color shape size kind type number visible main
""".split()


def photo(rng: Any, width: int, height: int) -> Any:
    """A photograph-like RGB PIL image: smooth colour field, texture, edges and sensor noise."""
    import numpy as np
    from PIL import Image, ImageDraw

    small = rng.integers(0, 256, size=(max(2, height // 96), max(2, width // 96), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(small).resize((width, height), Image.BICUBIC), np.float32)
    texture = rng.normal(0, 1, size=(max(2, height // 6), max(2, width // 6))).astype(np.float32)
    texture = Image.fromarray((texture * 40 + 128).clip(0, 255).astype(np.uint8))
    texture = np.asarray(texture.resize((width, height), Image.BILINEAR), np.float32)[..., None]
    image = base + (texture - 128) * 0.5
    canvas = Image.fromarray(image.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(3, 9))):  # objects with hard edges
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(20, width // 2 + 21)), y0 + int(rng.integers(20, height // 2 + 21))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    noisy = np.asarray(canvas, np.float32) + rng.normal(0, 5, size=(height, width, 1)).astype(np.float32)
    return Image.fromarray(noisy.clip(0, 255).astype(np.uint8))


def text(rng: Any, words: int, *, question: bool = False) -> str:
    """``words`` words of plain English from the benchmark vocabulary, in sentences."""
    out, sentence = [], []
    for _ in range(words):
        sentence.append(_WORDS[int(rng.integers(len(_WORDS)))])
        if len(sentence) >= int(rng.integers(6, 18)):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    if sentence:
        out.append(" ".join(sentence).capitalize() + ("?" if question else "."))
    return " ".join(out)


def _image_size(rng: Any, long_range: tuple[int, int]) -> tuple[int, int]:
    long = int(rng.integers(long_range[0], long_range[1] + 1))
    short = int(round(long * rng.uniform(0.5, 1.0)))
    return (long, short) if rng.random() < 0.6 else (short, long)


def _jpeg(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def realistic_dataset(
    num_samples: int = 240,
    *,
    seed: int = 0,
    samples_per_shard: int = 12,
    long_side: tuple[int, int] = (400, 1600),
    cache: Path | None = None,
) -> Path:
    """Write (or reuse) the realistic VQA dataset; return its path."""
    import numpy as np
    import webdataset as wds

    args = {
        "version": VERSION,
        "num_samples": num_samples,
        "seed": seed,
        "samples_per_shard": samples_per_shard,
        "long_side": list(long_side),
    }
    name = f"realistic-{num_samples}-{seed}-{long_side[0]}-{long_side[1]}"
    root = (cache or CACHE) / name
    stamp = root / ".nv-meta" / "benchmark_args.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == args:
        return root
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("shard-*.tar"):
        old.unlink()
    rng = np.random.default_rng(seed)
    with contextlib.redirect_stdout(io.StringIO()):
        with wds.ShardWriter(str(root / "shard-%06d.tar"), maxcount=samples_per_shard, verbose=0) as sink:
            for i in range(num_samples):
                width, height = _image_size(rng, long_side)
                meta = {
                    "question": text(rng, int(rng.integers(5, 31)), question=True),
                    "answers": [text(rng, int(rng.integers(30, 301)))],
                }
                sink.write(
                    {
                        "__key__": f"photo-{i:06d}",
                        "jpg": _jpeg(photo(rng, width, height)),
                        "json": json.dumps(meta).encode(),
                    }
                )
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory

    shards = sorted(p.name for p in root.glob("shard-*.tar"))
    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(
            root, shards, split_parts_ratio=[("train", 1.0)], shuffle_seed=None, workers=1
        )
    (root / ".nv-meta" / "dataset.yaml").write_text(
        "sample_type:\n  __module__: megatron.energon\n  __class__: VQASample\n"
        "field_map:\n  image: jpg\n  context: json[question]\n  answers: json[answers]\n"
    )
    stamp.write_text(json.dumps(args))
    return root


def saved_tokenizers(cache: Path | None = None) -> dict[str, str]:
    """Save (once) the LLaVA and Qwen2 demo tokenizers trained on the benchmark vocabulary."""
    from energon_plugins.synthetic import save_demo_tokenizer

    out = {}
    corpus = [" ".join(_WORDS), " ".join(w.capitalize() for w in _WORDS) + " . ? , "]
    for family in ("llava", "qwen2"):
        directory = (cache or CACHE) / f"tokenizer-{family}-v{VERSION}"
        if not (directory / "tokenizer_config.json").is_file():
            save_demo_tokenizer(directory, family, corpus=corpus, vocab_size=1200)
        out[family] = str(directory)
    return out


def image_stats(path: Path, limit: int = 64) -> dict[str, Any]:
    """Sizes and bytes of the first ``limit`` images (for the report)."""
    import tarfile

    from PIL import Image

    sides, sizes = [], []
    for shard in sorted(path.glob("shard-*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar:
                if member.name.endswith(".jpg"):
                    data = tar.extractfile(member).read()
                    sizes.append(len(data))
                    sides.append(Image.open(io.BytesIO(data)).size)
                if len(sizes) >= limit:
                    break
        if len(sizes) >= limit:
            break
    longs = [max(s) for s in sides]
    return {
        "images": len(sizes),
        "long_side_px": [min(longs), max(longs)],
        "mean_megapixels": round(sum(w * h for w, h in sides) / len(sides) / 1e6, 2),
        "mean_kb": round(sum(sizes) / len(sizes) / 1024),
    }


def qwen2_vl_config(path: str, tokenizer: str, *, workers: int, packing: bool) -> dict:
    """The Qwen2-VL datamodule config of the measurements."""
    cfg = {
        "path": path,
        "seq_length": 2048,
        "micro_batch_size": 4,
        "global_batch_size": 4,
        "num_workers": workers,
        "shuffle_buffer_size": 100,
        "tokenizer": {"path": tokenizer},
        "image_processor": {"name": "fast-qwen2-vl"},
        "task_encoder": {"name": "qwen2-vl"},
        "batch_format": None,
    }  # batches read as the encoder's (throughput/batch_formats.py)
    if packing:
        cfg.update(
            seq_length=4096,
            micro_batch_size=1,
            global_batch_size=1,
            packing_buffer_size=100,
            packing={"name": "first-fit-decreasing"},
        )
    return cfg
