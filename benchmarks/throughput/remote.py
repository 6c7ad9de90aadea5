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
- ``S3 + latency + cache pool``: the same with the datamodule's ``cache_pool`` (Energon's
  ``FileStoreCachePool`` in a local folder), after one pass that fills it, when the installed
  datamodule has that setting.

``--rounds`` interleaved rounds, medians, each rate as a ratio of the local rate of the same run
(the machine is shared: never asserted). Goals: S3 >= 0.7x local (the storage client adds
little), cache pool >= 0.8x local on the second pass. ``--quick``: 48 samples, 4 batches.
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

GOALS = {"S3": 0.7, "S3 + latency + cache pool": 0.8}
WARMUP = 3


def _rate(config: dict, batches: int, passes: int = 1) -> float:
    """Samples/s of a fresh datamodule's train loader over ``batches`` batches after warm-up;
    with ``passes`` > 1 the earlier passes (same loader settings, fresh loaders) are untimed."""
    from energon_plugins import EnergonMultiModalDataModule

    for _ in range(passes - 1):
        dm = EnergonMultiModalDataModule.from_config(config)
        iterator = iter(dm.train_dataloader())
        for _ in range(WARMUP + batches):
            next(iterator)
        del iterator, dm
        gc.collect()
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


def _supports_cache_pool() -> bool:
    from energon_plugins.config.settings import LoaderSettings

    return "cache_pool" in LoaderSettings.model_fields


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

    from energon_plugins.testing.object_store import DelayProxy, LocalS3

    torch.set_num_threads(1)
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1
    warnings.filterwarnings("ignore")
    local = realistic_dataset(args.samples)
    tokenizer = saved_tokenizers()["qwen2"]
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalS3.start(Path(tmp) / "s3") as s3:
        bucket = s3.new_bucket("bench")
        uploaded = s3.upload_folder(local, bucket, "vqa")
        proxy = DelayProxy(s3.port)
        proxy.delay = args.latency_ms / 1000
        s3.write_config({"direct": (s3.endpoint, bucket), "slow": (proxy.endpoint, bucket)})
        base = lambda path: qwen2_vl_config(path, tokenizer, workers=args.workers, packing=False)
        cases: dict[str, tuple[dict, int]] = {
            "local": (base(str(local)), 1),
            "S3": (base("msc://direct/vqa"), 1),
            "S3 + latency": (base("msc://slow/vqa"), 1),
        }
        if _supports_cache_pool():
            cached = base("msc://slow/vqa")
            cached["cache_pool"] = {"path": str(Path(tmp) / "cache"), "max_size_gb": 4}
            cases["S3 + latency + cache pool"] = (cached, 2)
        with s3.environment():
            for r in range(args.rounds):
                names = list(cases)
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    config, passes = cases[name]
                    rates.setdefault(name, []).append(_rate(config, args.batches, passes))
        proxy.close()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    baseline = medians["local"]
    rows = [[name, f"{rate:.1f}", f"{rate / baseline:.2f}x"] for name, rate in medians.items()]
    print_table(
        f"Samples/s, {args.workers} workers, {args.batches} batches of 4 ({uploaded} objects, "
        f"latency {args.latency_ms} ms per response chunk)",
        ["source", "samples/s", "vs local"],
        rows,
    )
    goals = [
        {
            "goal": f"{name} >= {goal}x local",
            "met": medians[name] / baseline >= goal,
            "detail": f"{medians[name]:.1f} vs {baseline:.1f} samples/s ({medians[name] / baseline:.2f}x)",
        }
        for name, goal in GOALS.items()
        if name in medians
    ]
    for g in goals:
        print(goal_line(g["goal"], g["met"], g["detail"]))
    result = {
        "samples_per_s": {k: round(v, 2) for k, v in medians.items()},
        "goals": goals,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "summary": goal_rows(goals, "ratio to local"),
    }
    if args.json:
        print(f"wrote {write_json(args.json, 'remote', result)}")
    return result


if __name__ == "__main__":
    main()
