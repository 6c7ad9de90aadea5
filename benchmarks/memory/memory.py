"""Loader memory on realistic data: worker RSS with Qwen packing, and RSS over rebuilt loaders.

Run: ``python benchmarks/memory/memory.py [--batches 30] [--rebuilds 20] [--json FILE] [--quick]``.

1. **Worker RSS**: ``qwen2-vl`` + ``fast-qwen2-vl`` with first-fit-decreasing packing (buffer
   100, capacity 4,096) and without packing (micro batch 4), 2 workers, ``shuffle_buffer_size``
   100, on the realistic dataset (:mod:`_shared.realistic`); after ``--batches`` batches, the peak
   resident set of each worker (``VmHWM``) and of the main process. A forked worker's resident
   set counts the pages it shares with the main process (imports).
2. **Rebuilt loaders**: ``--rebuilds`` times, a datamodule and its training loader are built
   at 0 workers, 3 batches pulled, and everything dropped (``gc.collect()``); this process's
   resident set (``VmRSS``) after each. The same for a hand-wired Energon loader over the same
   dataset and encoder (``get_savable_loader(dataset)``), and with Energon's watchdog off
   (``watchdog_timeout_seconds=None``). Energon 7.4.1's ``WatchdogDataset.__iter__`` starts a
   ``Watchdog`` daemon thread and never calls its ``finish()``: the thread lives on with a
   reference to the whole dataset chain, shuffle buffer included, so every discarded loader
   that was iterated stays in memory (its shuffle buffer's images: 100 float32 photos, about
   1 GB, with Energon's default decode; 100 encoded JPEGs, about 30 MB, with ``image_input =
   "bytes"``).
"""

import argparse
import gc
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, summary_row, write_json
from _shared.realistic import qwen2_vl_config, realistic_dataset, saved_tokenizers

BENCHMARK = {"name": "memory", "full": [], "quick": ["--quick"], "output": "file"}

MB = 1024 * 1024
RSS_GOAL_MB = 2048


def _status_kb(pid: int | str, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb(pid: int | str = "self", field: str = "VmRSS") -> float | None:
    """Resident set (or ``VmHWM``) of a process in MiB (Linux), else None."""
    kb = _status_kb(pid, field)
    return round(kb / 1024, 1) if kb is not None else None


def children() -> list[int]:
    pid = os.getpid()
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def worker_rss(path: str, tokenizer: str, batches: int, packing: bool) -> dict:
    """Peak RSS of the workers and of the main process after ``batches`` batches."""
    from energon_plugins import EnergonMultiModalDataModule

    dm = EnergonMultiModalDataModule.from_config(qwen2_vl_config(path, tokenizer, workers=2, packing=packing))
    iterator = iter(dm.train_dataloader())
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    seconds = time.perf_counter() - start
    workers = [rss_mb(pid, "VmHWM") for pid in children()]
    workers = [w for w in workers if w is not None]
    result = {
        "packing": packing,
        "batches": batches,
        "seconds": round(seconds, 1),
        "worker_peak_rss_mb": workers,
        "main_rss_mb": rss_mb(),
    }
    del iterator
    dm.train_dataloader_object = None
    del dm
    gc.collect()
    return result


def rebuilt(path: str, tokenizer: str, rebuilds: int, kind: str) -> dict:
    """This process's RSS after each of ``rebuilds`` built, used and dropped loaders."""
    from megatron.energon import get_savable_loader

    from energon_plugins import EnergonMultiModalDataModule

    series = []
    for _ in range(rebuilds):
        dm = EnergonMultiModalDataModule.from_config(
            qwen2_vl_config(path, tokenizer, workers=0, packing=False)
        )
        if kind == "datamodule":
            loader = dm.train_dataloader()
        else:
            dataset = dm.datasets_provider(dm._build_worker_config(0, split="train"), split="train")
            watchdog = {} if kind == "hand-wired" else {"watchdog_timeout_seconds": None}
            loader = get_savable_loader(dataset, **watchdog)
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
        del iterator, loader, dm
        gc.collect()
        series.append(rss_mb())
    return {
        "kind": kind,
        "rss_mb": series,
        "growth_mb": round(series[-1] - series[0], 1),
        "growth_per_loader_mb": round((series[-1] - series[0]) / max(1, len(series) - 1), 1),
    }


def main(argv=None) -> dict:
    """Measure, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rebuilds", type=int, default=20)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.rebuilds, args.samples = 3, 2, 48

    import torch
    import torch.utils.data._utils as data_utils

    torch.set_num_threads(1)
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1
    warnings.filterwarnings("ignore")
    path = str(realistic_dataset(args.samples))
    tokenizer = saved_tokenizers()["qwen2"]
    result = {"rss_after_imports_mb": None, "workers": [], "rebuilt": []}
    import energon_plugins  # noqa: F401 - imports counted in the baseline RSS

    result["rss_after_imports_mb"] = rss_mb()
    for packing in (True,) if args.quick else (True, False):
        result["workers"].append(worker_rss(path, tokenizer, args.batches, packing))
    kinds = ("datamodule", "hand-wired", "hand-wired, watchdog_timeout_seconds=None")
    for kind in kinds[:1] if args.quick else kinds:
        result["rebuilt"].append(rebuilt(path, tokenizer, args.rebuilds, kind))
    print_table(
        "Worker RSS, qwen2-vl + fast-qwen2-vl, 2 workers, shuffle buffer 100 (MiB)",
        ["packing", "batches", "worker peak RSS", "main RSS"],
        [
            [
                "FFD, buffer 100" if r["packing"] else "none (micro batch 4)",
                r["batches"],
                ", ".join(str(w) for w in r["worker_peak_rss_mb"]),
                r["main_rss_mb"],
            ]
            for r in result["workers"]
        ],
    )
    print_table(
        f"RSS of this process over {args.rebuilds} rebuilt loaders, 0 workers (MiB)",
        ["loader", "first", "last", "growth per loader"],
        [[r["kind"], r["rss_mb"][0], r["rss_mb"][-1], r["growth_per_loader_mb"]] for r in result["rebuilt"]],
    )
    packed = next(r for r in result["workers"] if r["packing"])
    peak = max(packed["worker_peak_rss_mb"] or [0])
    dm = result["rebuilt"][0]
    result["goals"] = [
        {
            "goal": f"worker RSS with Qwen packing (buffer 100) <= {RSS_GOAL_MB} MiB",
            "met": bool(packed["worker_peak_rss_mb"]) and peak <= RSS_GOAL_MB,
            "detail": f"peak {peak} MiB per worker",
        },
        {
            "goal": f"RSS flat over {args.rebuilds} rebuilt datamodule loaders (growth <= 10 MiB per loader)",
            "met": dm["growth_per_loader_mb"] <= 10,
            "detail": f"{dm['rss_mb'][0]} -> {dm['rss_mb'][-1]} MiB ({dm['growth_per_loader_mb']} MiB per "
            f"loader; {result['rebuilt'][-1]['kind']}: "
            f"{result['rebuilt'][-1]['growth_per_loader_mb']} MiB per loader)",
        },
    ]
    for g in result["goals"]:
        print(goal_line(g["goal"], g["met"], g["detail"]))
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'memory', result)}")
    return result


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: worker peak RSS, RSS over rebuilt loaders, the goals."""
    rows = []
    for r in result["workers"]:
        what = "packing buffer 100" if r["packing"] else "no packing"
        rows.append(summary_row(f"worker peak RSS, 2 workers, {what}", f"{r['worker_peak_rss_mb']} MiB"))
    for r in result["rebuilt"]:
        rows.append(
            summary_row(
                f"RSS over rebuilt loaders ({r['kind']})",
                f"{r['rss_mb'][0]} -> {r['rss_mb'][-1]} MiB ({r['growth_per_loader_mb']} MiB per loader)",
            )
        )
    return rows + goal_rows(result["goals"])


if __name__ == "__main__":
    main()
