"""``energon-plugins convert`` against a hand-written webdataset script doing the same work.

Run: ``python benchmarks/convert/convert.py [--records 20000] [--workers N] [--json out.json]``.

The input is generated: a LLaVA JSON array of ``--records`` records (one or two rounds of
turns each) over a pool of 256 JPEG images of 320x240 (about 10-20 KB each; records reuse
them, so the page cache holds the images and the figure is the converter's own cost), plus
``--bad`` percent of records with a missing image. Both sides, each in a fresh process:

- **convert**: ``energon_plugins.convert_dataset(..., "llava-json")`` (streamed JSON, worker
  processes, checks, size-bounded shards, Energon's prepare);
- **hand-written**: what a user writes today (``json.load`` of the whole file; for each
  record read the image, decode it with PIL, count the ``<image>`` tags, check the turns;
  ``webdataset.ShardWriter(maxsize=...)``; Energon's ``prepare_dataset`` with a split ratio;
  ``dataset.yaml``), in one process.

Figures: records per second (wall, the whole run including Energon's prepare and imports),
CPU seconds of the whole process tree (workers included: what the work costs, whatever else
the machine runs),
peak resident memory of the converting process (``ru_maxrss``; for convert also its largest
worker), at two sizes (a quarter of ``--records`` and ``--records``), so the growth of memory
with the number of records shows. Both outputs are checked to hold the same samples.
"""

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json

BENCHMARK = {
    "name": "convert",
    "full": ["--records", "20000"],
    "quick": ["--records", "200"],
    "output": "file",
}

POOL = 256
SHARD_BYTES = 64 * 10**6


def generate(root: Path, records: int, bad_percent: float) -> Path:
    """Write ``root/images/*.jpg`` and ``root/data.json``; return the JSON path."""
    import numpy as np
    from PIL import Image

    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(POOL):
        path = images / f"{i:04d}.jpg"
        if not path.exists():
            base = rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)
            Image.fromarray(base).resize((320, 240)).save(path, quality=90)
    bad_every = int(100 / bad_percent) if bad_percent > 0 else 0
    with (root / "data.json").open("w") as fh:
        fh.write("[")
        for i in range(records):
            image = (
                f"missing-{i}.jpg" if bad_every and i % bad_every == bad_every - 1 else f"{i % POOL:04d}.jpg"
            )
            turns = [
                {"from": "human", "value": f"<image>\nWhat is shown in picture {i}?"},
                {"from": "gpt", "value": f"A picture of noise number {i}, in colour."},
            ]
            if i % 2:
                turns += [
                    {"from": "human", "value": "Describe it in more detail."},
                    {"from": "gpt", "value": "Blocks of colour, some bright, some dark."},
                ]
            fh.write(("," if i else "") + json.dumps({"id": str(i), "image": image, "conversations": turns}))
        fh.write("]")
    return root / "data.json"


# ----------------------------------------------------------------------------- the two sides
def run_convert(source: Path, out: Path, workers: int | None) -> int:
    """The converter; returns the samples written."""
    from energon_plugins import convert_dataset

    result = convert_dataset(
        source,
        out,
        "llava-json",
        options={"image_folder": str(source.parent / "images")},
        split_ratio="train=0.95,val=0.05",
        shard_size=SHARD_BYTES,
        workers=workers,
    )
    return sum(result.written.values())


def run_handwritten(source: Path, out: Path) -> int:
    """A straightforward script: load the JSON, check each record, ShardWriter, prepare."""
    import contextlib

    import webdataset as wds
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory
    from PIL import Image

    records = json.load(source.open())
    folder = source.parent / "images"
    out.mkdir(parents=True)
    written = 0
    with contextlib.redirect_stdout(io.StringIO()):
        with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=SHARD_BYTES, verbose=0) as sink:
            for i, record in enumerate(records):
                try:
                    data = (folder / record["image"]).read_bytes()
                    Image.open(io.BytesIO(data)).load()
                except (OSError, KeyError):
                    continue
                turns = record["conversations"]
                if sum(t["value"].count("<image>") for t in turns) != 1:
                    continue
                roles = [t["from"] for t in turns]
                if roles != ["human", "gpt"] * (len(roles) // 2) or not turns[-1]["value"].strip():
                    continue
                sink.write(
                    {
                        "__key__": f"{i:010d}",
                        "jpg": data,
                        "json": json.dumps({"conversations": turns}).encode(),
                    }
                )
                written += 1
        shards = sorted(p.name for p in out.glob("shard-*.tar"))
        BaseWebdatasetFactory.prepare_dataset(
            out, shards, split_parts_ratio=[("train", 0.95), ("val", 0.05)], shuffle_seed=None, workers=2
        )
    (out / ".nv-meta" / "dataset.yaml").write_text(
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors:\n  format: chatml\n"
    )
    return written


def child(side: str, source: Path, out: Path, workers: int | None) -> None:
    """Run one side in this (fresh) process; print its figures as JSON."""
    start = time.perf_counter()
    written = run_convert(source, out, workers) if side == "convert" else run_handwritten(source, out)
    seconds = time.perf_counter() - start
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "written": written,
                "cpu_seconds": round(cpu, 2),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "children_peak_rss_mb": round(
                    resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
                ),
            }
        )
    )


def measure(side: str, source: Path, out: Path, workers: int | None) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--source", str(source), "--out", str(out)]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary_rows(figures: dict) -> list[list]:
    """The key figures for ``run_all.py``: records/s (goal: faster than the hand-written script),
    peak RSS and its growth with the input."""
    return [
        summary_row(
            f"records/s at {figures['records']} LLaVA records: convert / hand-written script",
            f"{figures['convert_records_per_s']} / {figures['handwritten_records_per_s']} "
            f"({figures['ratio_records_per_s']}x; CPU s {figures['convert_cpu_seconds']} / "
            f"{figures['handwritten_cpu_seconds']})",
            "> 1",
            figures["ratio_records_per_s"] > 1,
        ),
        summary_row(
            "peak RSS MiB: convert (largest worker) / hand-written script",
            f"{figures['convert_peak_rss_mb']} ({figures['convert_worker_peak_rss_mb']}) / "
            f"{figures['handwritten_peak_rss_mb']}",
        ),
        summary_row(
            "peak RSS growth per 10k records, MiB: convert / hand-written",
            f"{figures['convert_rss_growth_mb_per_10k_records']} / "
            f"{figures['handwritten_rss_growth_mb_per_10k_records']}",
        ),
    ]


def main(argv=None) -> int:
    """Generate the input, run both sides at two sizes, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--bad", type=float, default=1.0, help="percent of records with a missing image")
    parser.add_argument("--workers", type=int, default=None, help="convert's workers (default: one per CPU)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--child", choices=["convert", "hand-written"], help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, Path(args.source), Path(args.out), args.workers)
        return 0

    sizes = sorted({max(1, args.records // 4), args.records})
    rows, runs = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for size in sizes:
            source = generate(root / f"src-{size}", size, args.bad)
            for side in ("hand-written", "convert"):
                result = measure(side, source, root / f"out-{side}-{size}", args.workers)
                result["records_per_s"] = round(size / result["seconds"], 1)
                runs[f"{side}@{size}"] = result
                rows.append(
                    [
                        side,
                        size,
                        result["written"],
                        result["seconds"],
                        result["records_per_s"],
                        result["cpu_seconds"],
                        result["peak_rss_mb"],
                        result["children_peak_rss_mb"],
                    ]
                )
    print_table(
        "convert vs a hand-written webdataset script (fresh processes)",
        [
            "side",
            "records",
            "written",
            "wall s",
            "records/s",
            "CPU s (all processes)",
            "peak RSS MiB",
            "largest child RSS MiB",
        ],
        rows,
    )
    top = sizes[-1]
    ours, theirs = runs[f"convert@{top}"], runs[f"hand-written@{top}"]
    if ours["written"] != theirs["written"]:
        raise SystemExit(f"the two sides wrote {ours['written']} and {theirs['written']} samples")

    def growth(side: str) -> float:  # MiB per 10,000 records between the two sizes
        if len(sizes) < 2:
            return 0.0
        low, high = runs[f"{side}@{sizes[0]}"], runs[f"{side}@{top}"]
        return round((high["peak_rss_mb"] - low["peak_rss_mb"]) / (top - sizes[0]) * 10000, 1)

    figures = {
        "records": top,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "convert_records_per_s": ours["records_per_s"],
        "handwritten_records_per_s": theirs["records_per_s"],
        "ratio_records_per_s": round(ours["records_per_s"] / theirs["records_per_s"], 2),
        "convert_cpu_seconds": ours["cpu_seconds"],
        "handwritten_cpu_seconds": theirs["cpu_seconds"],
        "convert_peak_rss_mb": ours["peak_rss_mb"],
        "convert_worker_peak_rss_mb": ours["children_peak_rss_mb"],
        "handwritten_peak_rss_mb": theirs["peak_rss_mb"],
        "convert_rss_growth_mb_per_10k_records": growth("convert"),
        "handwritten_rss_growth_mb_per_10k_records": growth("hand-written"),
        "runs": runs,
    }
    print(
        f"convert / hand-written records/s at {top} records: {figures['ratio_records_per_s']}x "
        f"(CPU s {ours['cpu_seconds']} / {theirs['cpu_seconds']}); "
        f"peak RSS {ours['peak_rss_mb']} / {theirs['peak_rss_mb']} MiB; growth per 10k records "
        f"{figures['convert_rss_growth_mb_per_10k_records']} / "
        f"{figures['handwritten_rss_growth_mb_per_10k_records']} MiB"
    )
    if args.json:
        write_json(args.json, "convert", {**figures, "summary": summary_rows(figures)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
