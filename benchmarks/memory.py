"""Peak memory of loading: resident set of this process and of the loader workers, and the
Python-side allocation peak.

Run: ``python benchmarks/memory.py [--batches 60] [--workers 2] [--json out.json] [--quick]``.

Three phases over the demo pipeline (``multimodal`` encoder, ``hf`` CLIP processor, batch 8):

1. after imports and building the datamodule: this process's resident set (``VmRSS``);
2. ``--batches`` batches with 0 workers: the peak resident set of this process (``VmHWM``,
   else ``ru_maxrss`` of ``RUSAGE_SELF``), and, with ``tracemalloc`` on during a further
   ``--batches`` batches, the peak of Python-side allocations (numpy buffers included; torch's
   tensor storage is not traced);
3. ``--batches`` batches with ``--workers`` workers: the largest peak resident set of a
   worker (its ``VmHWM`` while alive; else ``ru_maxrss`` of ``RUSAGE_CHILDREN``). A forked
   worker's resident set counts the pages it shares with the main process.
"""

import argparse
import os
import resource
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402
from _pipeline import load_average, prepare, quiet_loading, timed_batches  # noqa: E402

MB = 1024 * 1024


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:  # pragma: no cover - not Linux
        return None
    return None


def rss_mb() -> float | None:
    """This process's current resident set in MiB (Linux), else None."""
    kb = _status_kb("VmRSS")
    return round(kb / 1024, 1) if kb is not None else None


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident set in MiB: ``VmHWM`` for this process, ``ru_maxrss`` otherwise."""
    if who == resource.RUSAGE_SELF:
        kb = _status_kb("VmHWM")
        if kb is not None:
            return round(kb / 1024, 1)
    maxrss = resource.getrusage(who).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(maxrss / (MB if sys.platform == "darwin" else 1024), 1)


def child_peak_rss_mb() -> list[float]:
    """Peak resident set (``VmHWM``, MiB) of each live child process (Linux), e.g. loader workers."""
    pid = os.getpid()
    peaks = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:  # pragma: no cover - not Linux
        return []
    for child in children:
        try:
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(round(int(line.split()[1]) / 1024, 1))
        except OSError:
            continue
    return peaks


def measure(batches: int, workers: int, cache_dir: str | None = None) -> dict:
    """Run the three phases; figures in MiB."""
    import torch.utils.data._utils as data_utils

    from energon_plugins import EnergonMultiModalDataModule

    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1  # quick worker shutdown
    config = prepare(cache_dir)
    result: dict = {"batches": batches, "workers": workers, "load_average": load_average()}
    with quiet_loading(1):
        dm = EnergonMultiModalDataModule.from_config(config)
        iterator = iter(dm.train_dataloader())
        result["rss_after_build_mb"] = rss_mb()
        timed_batches(iterator, batches)
        result["peak_rss_0_workers_mb"] = peak_rss_mb()
        tracemalloc.start()
        timed_batches(iterator, batches)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result["python_alloc_peak_mb"] = round(peak / MB, 1)
        del iterator, dm
        if workers:
            dm = EnergonMultiModalDataModule.from_config({**config, "num_workers": workers})
            iterator = iter(dm.train_dataloader())
            timed_batches(iterator, batches)
            result["peak_rss_main_with_workers_mb"] = peak_rss_mb()
            workers_peak = child_peak_rss_mb()  # while the workers are alive
            del iterator
            dm.train_dataloader_object = None
            del dm
            import gc

            gc.collect()
            result["peak_rss_worker_mb"] = max(
                workers_peak or [peak_rss_mb(resource.RUSAGE_CHILDREN)])
    return result


def main(argv=None) -> dict:
    """Measure, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache-dir")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.workers = 2, 1
    result = measure(args.batches, args.workers, args.cache_dir)
    labels = {
        "rss_after_build_mb": "resident after imports + datamodule",
        "peak_rss_0_workers_mb": f"peak resident, {args.batches} batches, 0 workers",
        "python_alloc_peak_mb": "peak Python-side allocations (tracemalloc)",
        "peak_rss_main_with_workers_mb": f"peak resident of main process, {args.workers} workers",
        "peak_rss_worker_mb": "peak resident of the largest worker",
    }
    rows = [[label, result[key]] for key, label in labels.items() if key in result]
    print_table(f"Memory (MiB, load {result['load_average']})", ["figure", "MiB"], rows)
    if args.json:
        print(f"wrote {write_json(args.json, 'memory', result)}")
    return result


if __name__ == "__main__":
    main()
