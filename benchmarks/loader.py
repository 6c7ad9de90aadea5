"""Loader benchmark: samples/s of the datamodule with 0, 1 and 2 workers, and the time a
restore takes after 1,000 batches, in one run.

Run: ``python benchmarks/loader.py [--batches 200] [--restore-after 1000] [--json out.json]``.

A VQA demo dataset (32x32 PNG + JSON, written with Energon's prepare API) is read through
``EnergonMultiModalDataModule`` with the built-in ``multimodal`` encoder and a default
``CLIPImageProcessor`` (224x224 output). Throughput: one warm-up batch (worker start and first
shard open not counted), then ``--batches`` timed batches. Restore: a loader is advanced by
``--restore-after`` batches and saved; a fresh datamodule restores the state, and the time
from ``restore_state`` to its first batch is compared with a fresh start's first batch. The
restored batch is checked to be the one the uninterrupted loader yields next.

``--threads`` sets torch's intra-op threads of the main process (default 1, as torch gives
every DataLoader worker). On a small shared machine the default thread count made the
0-worker figure 3-4x lower (41 against 149 samples/s measured here) through oversubscription.
With workers, a restore replays the samples read since each worker's last internal checkpoint
(Energon takes one every ``checkpoint_every_sec`` = 60 s), so its time grows with that.
"""

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def build(path: str, workers: int, mbs: int, seq: int):
    """A datamodule over ``path`` with ``workers`` training workers."""
    import transformers

    import energon_plugins
    from energon_plugins.demo.tokenizer import build_demo_tokenizer

    cls = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    return energon_plugins.EnergonMultiModalDataModule(
        path, build_demo_tokenizer(), cls(), seq_length=seq, micro_batch_size=mbs,
        num_workers=workers, shuffle_buffer_size=100, pin_memory=True,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 16}},
    )


def throughput(path: str, workers: int, batches: int, mbs: int, seq: int) -> dict:
    """Samples/s over ``batches`` batches after one warm-up batch."""
    dm = build(path, workers, mbs, seq)
    loader = dm.train_dataloader()
    started = time.perf_counter()
    next(loader)
    warmup = time.perf_counter() - started
    samples = 0
    started = time.perf_counter()
    for _ in range(batches):
        samples += len(next(loader)["__keys__"])
    elapsed = time.perf_counter() - started
    return {
        "workers": workers,
        "batches": batches,
        "samples": samples,
        "seconds": round(elapsed, 3),
        "warmup_seconds": round(warmup, 3),
        "samples_per_second": round(samples / elapsed, 1),
        "skip_counts": loader.skip_counts(),
    }


def restore_time(path: str, workers: int, after: int, mbs: int, seq: int) -> dict:
    """Advance ``after`` batches, save, restore into a fresh datamodule, time its first batch."""
    dm = build(path, workers, mbs, seq)
    loader = dm.train_dataloader()
    started = time.perf_counter()
    for _ in range(after):
        next(loader)
    advance = time.perf_counter() - started
    started = time.perf_counter()
    state = loader.save_state()
    save = time.perf_counter() - started
    expected = next(loader)["__keys__"]
    del loader, dm

    fresh = build(path, workers, mbs, seq)
    started = time.perf_counter()
    first_fresh = next(fresh.train_dataloader())
    fresh_first = time.perf_counter() - started
    del fresh, first_fresh

    restored = build(path, workers, mbs, seq)
    started = time.perf_counter()
    loader = restored.train_dataloader()
    loader.restore_state(state)
    batch = next(loader)
    restore = time.perf_counter() - started
    return {
        "workers": workers,
        "after_batches": after,
        "advance_seconds": round(advance, 2),
        "save_seconds": round(save, 4),
        "restore_to_first_batch_seconds": round(restore, 3),
        "fresh_first_batch_seconds": round(fresh_first, 3),
        "restored_batch_is_the_next_one": list(batch["__keys__"]) == list(expected),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the tables; optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="an existing prepared VQA dataset (default: write one)")
    parser.add_argument("--samples", type=int, default=600, help="samples in the written dataset")
    parser.add_argument("--batches", type=int, default=200, help="timed batches per worker count")
    parser.add_argument("--workers", default="0,1,2", help="worker counts, comma-separated")
    parser.add_argument("--restore-after", type=int, default=1000)
    parser.add_argument("--restore-workers", default="0,2", help="worker counts for the restore")
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads in the main process (0: leave torch's default)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)

    import torch.utils.data._utils as data_utils

    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1  # loaders with workers shut down in 0.1 s

    with tempfile.TemporaryDirectory() as tmp:
        path = args.data
        if path is None:
            from energon_plugins.demo.data import write_dataset

            path = str(write_dataset(Path(tmp) / "vqa", kind="vqa", num_samples=args.samples,
                                     samples_per_shard=20).path)
        mbs, seq = args.micro_batch_size, args.seq_length
        speed, restores = [], []
        for workers in args.workers.split(","):
            speed.append(throughput(path, int(workers), args.batches, mbs, seq))
            gc.collect()  # shut the last loader's workers down before the next one forks
        for workers in args.restore_workers.split(","):
            restores.append(restore_time(path, int(workers), args.restore_after, mbs, seq))
            gc.collect()

    print_table(
        f"datamodule throughput (micro batch {mbs}, {args.batches} batches, CLIP 224x224, "
        f"{torch.get_num_threads()} main-process torch threads)",
        ["workers", "samples/s", "seconds", "warm-up s"],
        [(r["workers"], r["samples_per_second"], r["seconds"], r["warmup_seconds"])
         for r in speed],
    )
    print_table(
        f"restore after {args.restore_after} batches",
        ["workers", "restore to 1st batch s", "fresh 1st batch s", "save s", "exact"],
        [(r["workers"], r["restore_to_first_batch_seconds"], r["fresh_first_batch_seconds"],
          r["save_seconds"], r["restored_batch_is_the_next_one"]) for r in restores],
    )
    ok = all(r["restored_batch_is_the_next_one"] for r in restores)
    if args.json:
        write_json(args.json, "loader", {
            "micro_batch_size": mbs, "seq_length": seq, "cpu_count": os.cpu_count(),
            "main_process_threads": torch.get_num_threads(),
            "throughput": speed, "restore": restores,
        })
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
