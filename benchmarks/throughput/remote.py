"""Reading from object storage against reading the same dataset from a local folder.

Run: ``python benchmarks/throughput/remote.py [--batches 30] [--rounds 2] [--workers 2]
[--latency-ms 5] [--json FILE] [--quick]``.

The realistic VQA dataset (:mod:`_shared.realistic`, JPEG photographs of 100-600 KB) is uploaded
to moto's S3 server, started as a separate process on 127.0.0.1
(:class:`energon_plugins.testing.object_store.LocalS3`), and read by the Qwen2-VL datamodule
(``qwen2-vl`` + ``fast-qwen2-vl``, no packing) through ``msc://`` paths: Energon's storage
client over HTTP, the same code path as a real bucket. Samples/s over ``--batches`` batches
after 3 warm-up batches, for:

- ``local``: the folder (the baseline);
- ``S3``: the server directly (a loopback network: what the storage client itself costs);
- ``S3 + latency``: through :class:`~energon_plugins.testing.object_store.DelayProxy`, which
  holds every response chunk ``--latency-ms`` (a store across a network);
Energon's cache pool serves media that samples fetch from an auxiliary source (a polylithic
dataset: conversations in one dataset, the images in a separate store), so it is measured on
one (:func:`energon_plugins.synthetic.write_polylithic_dataset`: LLaVA conversations, 256 px
PNGs, the ``multimodal`` encoder with CLIP at 224 px), the images read:

- ``aux, local folder``: from a local ``filesystem://`` folder (the aux baseline);
- ``aux, S3 + latency``: from a bucket through the delaying proxy, one read per image while
  the sample is cooked;
- ``aux, S3 + latency + cache pool``: the same with ``cache_pool`` (Energon's
  ``FileStoreCachePool``: the images fetched by background threads while their samples wait
  in the shuffle buffer, then read from a local folder).

``--rounds`` interleaved rounds, medians, each rate as a ratio of its baseline's rate in the
same run (the machine is shared: never asserted). Goals: S3 >= 0.7x local (the storage client
adds little); the cache pool >= 1.5x the same aux reads without it. ``--quick``: 48 samples, 4
batches.
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, write_json
from _shared.realistic import qwen2_vl_config, realistic_dataset, saved_tokenizers

BENCHMARK = {"name": "remote", "full": [], "quick": ["--quick"], "output": "file"}

GOALS = {
    "S3": ("local", 0.7),
    "aux, S3 + latency + cache pool": ("aux, S3 + latency", 1.5),
}
"""Case -> (its baseline, the least ratio to it)."""
BASELINES = {
    "local": "local",
    "S3": "local",
    "S3 + latency": "local",
    "aux, local folder": "aux, local folder",
    "aux, S3 + latency": "aux, local folder",
    "aux, S3 + latency + cache pool": "aux, local folder",
}
WARMUP = 3


def _rate(config: dict, batches: int) -> float:
    """Samples/s of a fresh datamodule's train loader over ``batches`` batches after warm-up."""
    from energon_plugins import EnergonMultiModalDataModule

    dm = EnergonMultiModalDataModule.from_config(config)
    iterator = iter(dm.train_dataloader())
    for _ in range(WARMUP):
        next(iterator)
    samples, start = 0, time.perf_counter()
    for _ in range(batches):
        samples += len(next(iterator).__key__)
    rate = samples / (time.perf_counter() - start)
    del iterator, dm
    gc.collect()
    return rate


def _aux_config(blend: Path, tokenizer: str, workers: int, cache: Path | None) -> dict:
    """The datamodule config reading the polylithic dataset through ``blend``."""
    config = {
        "path": str(blend),
        "seq_length": 1024,
        "micro_batch_size": 4,
        "global_batch_size": 4,
        "num_workers": workers,
        "shuffle_buffer_size": 32,
        "tokenizer": {"path": tokenizer},
        "image_processor": {"name": "hf"},
        "task_encoder": {"name": "multimodal"},
        "batch_format": None,
    }
    if cache is not None:
        config["cache_pool"] = {"path": str(cache), "max_size_gb": 1}
    return config


def main(argv=None) -> dict:
    """Measure, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.samples, args.rounds = 4, 48, 1

    import torch
    import torch.utils.data._utils as data_utils

    from energon_plugins.synthetic import polylithic_metadataset, write_polylithic_dataset
    from energon_plugins.testing.object_store import DelayProxy, LocalS3

    torch.set_num_threads(1)
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1
    warnings.filterwarnings("ignore")
    local = realistic_dataset(args.samples)
    tokenizer = saved_tokenizers()["qwen2"]
    llava = saved_tokenizers()["llava"]
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalS3.start(Path(tmp) / "s3") as s3:
        root = Path(tmp)
        bucket, media = s3.new_bucket("bench"), s3.new_bucket("media")
        uploaded = s3.upload_folder(local, bucket, "vqa")
        write_polylithic_dataset(
            root / "aux", num_samples=args.samples, samples_per_shard=12, image_size=(256, 256)
        )
        uploaded += s3.upload_folder(root / "aux" / "media", media, "images")
        uploaded += s3.upload_folder(root / "aux" / "conversations", bucket, "conversations")
        proxy = DelayProxy(s3.port)
        proxy.delay = args.latency_ms / 1000
        s3.write_config(
            {
                "direct": (s3.endpoint, bucket),
                "slow": (proxy.endpoint, bucket),
                "slowmedia": (proxy.endpoint, media),
            }
        )
        local_blend = polylithic_metadataset(
            root / "aux" / "local.yaml", "conversations", {"media": "filesystem://media"}
        )
        remote_blend = polylithic_metadataset(
            root / "remote.yaml", "msc://direct/conversations", {"media": "filesystem+msc://slowmedia/images"}
        )

        def qwen(path: str) -> dict:
            return qwen2_vl_config(path, tokenizer, workers=args.workers, packing=False)

        cases: dict[str, dict] = {
            "local": qwen(str(local)),
            "S3": qwen("msc://direct/vqa"),
            "S3 + latency": qwen("msc://slow/vqa"),
            "aux, local folder": _aux_config(local_blend, llava, args.workers, None),
            "aux, S3 + latency": _aux_config(remote_blend, llava, args.workers, None),
            "aux, S3 + latency + cache pool": _aux_config(remote_blend, llava, args.workers, root / "cache"),
        }
        with s3.environment():
            for r in range(args.rounds):
                names = list(cases)
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    rates.setdefault(name, []).append(_rate(cases[name], args.batches))
        proxy.close()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    rows = [
        [name, f"{rate:.1f}", f"{rate / medians[BASELINES[name]]:.2f}x vs {BASELINES[name]}"]
        for name, rate in medians.items()
    ]
    print_table(
        f"Samples/s, {args.workers} workers, {args.batches} batches of 4 ({uploaded} objects, "
        f"latency {args.latency_ms} ms per response chunk)",
        ["source", "samples/s", "ratio"],
        rows,
    )
    goals = []
    for name, (against, goal) in GOALS.items():
        ratio = medians[name] / medians[against]
        goals.append(
            {
                "goal": f"{name} >= {goal}x {against}",
                "met": ratio >= goal,
                "detail": f"{medians[name]:.1f} vs {medians[against]:.1f} samples/s ({ratio:.2f}x)",
            }
        )
    for g in goals:
        print(goal_line(g["goal"], g["met"], g["detail"]))
    result = {
        "samples_per_s": {k: round(v, 2) for k, v in medians.items()},
        "goals": goals,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "summary": goal_rows(goals, "ratio to its baseline"),
    }
    if args.json:
        print(f"wrote {write_json(args.json, 'remote', result)}")
    return result


if __name__ == "__main__":
    main()
