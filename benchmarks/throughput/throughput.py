"""Loader throughput of the default pipeline with 0, 1 and 2 worker processes.

Run: ``python benchmarks/throughput/throughput.py [--workers 0 1 2] [--rounds 2] [--batches 30]
[--json out.json] [--quick]``.

The datamodule is built from the demo config (``multimodal`` encoder, ``hf`` CLIP processor,
batch 8) with ``num_workers`` set per contender. Each round builds a fresh loader per worker
count (the order rotates between rounds), pulls two batches to start the workers, then times
``--batches`` batches by wall clock (workers are other processes, so CPU time of this process
would miss their work). The figure is the best round (least disturbed by other processes on
this shared machine), with the median next to it, and the time to the first batch.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json
from _shared.pipeline import load_average, prepare, quiet_loading, timed_batches

BENCHMARK = {"name": "throughput", "full": [], "quick": ["--quick"], "output": "file"}


def _fast_worker_shutdown() -> None:
    """Deleting a loader with workers: ~0.1 s instead of ~5 s (as Energon's own tests do)."""
    import torch.utils.data._utils as data_utils

    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1


def one_round(config: dict, workers: int, batches: int) -> dict:
    """Build a loader with ``workers`` workers; first-batch seconds and timed samples/s."""
    from energon_plugins import EnergonMultiModalDataModule

    dm = EnergonMultiModalDataModule.from_config({**config, "num_workers": workers})
    start = time.perf_counter()
    iterator = iter(dm.train_dataloader())
    timed_batches(iterator, 1)
    first = time.perf_counter() - start
    timed_batches(iterator, 1)
    samples, wall, _ = timed_batches(iterator, batches)
    del iterator, dm
    return {"first_batch_s": first, "samples_per_s": samples / wall}


def measure(workers: list[int], rounds: int, batches: int, cache_dir: str | None = None) -> dict:
    """Samples/s per worker count over interleaved rounds."""
    _fast_worker_shutdown()
    config = prepare(cache_dir)
    runs: dict[int, list[dict]] = {w: [] for w in workers}
    with quiet_loading(1):
        for r in range(rounds):
            order = workers[r % len(workers) :] + workers[: r % len(workers)]
            for w in order:
                runs[w].append(one_round(config, w, batches))
    out = {}
    for w, rs in runs.items():
        rates = [x["samples_per_s"] for x in rs]
        out[str(w)] = {
            "samples_per_s_best": round(max(rates), 1),
            "samples_per_s_median": round(statistics.median(rates), 1),
            "first_batch_s_median": round(statistics.median(x["first_batch_s"] for x in rs), 3),
        }
    base = out[str(workers[0])]["samples_per_s_best"]
    for w in workers:
        out[str(w)]["ratio_to_first"] = round(out[str(w)]["samples_per_s_best"] / base, 3)
    return {"workers": out, "rounds": rounds, "batches_per_round": batches, "load_average": load_average()}


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: samples/s per worker count against the first count."""
    first = next(iter(result["workers"]))
    return [
        summary_row(
            f"{workers} workers: samples/s, best (median; x {first} workers; first batch)",
            f"{r['samples_per_s_best']} ({r['samples_per_s_median']}; {r['ratio_to_first']}x; "
            f"{r['first_batch_s_median']} s)",
        )
        for workers, r in result["workers"].items()
    ]


def main(argv=None) -> dict:
    """Measure, print a table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--cache-dir")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.rounds, args.batches = [0, 1], 1, 2
    result = measure(args.workers, args.rounds, args.batches, args.cache_dir)
    rows = [
        [
            w,
            r["samples_per_s_best"],
            r["samples_per_s_median"],
            f"{r['ratio_to_first']:.2f}",
            r["first_batch_s_median"],
        ]
        for w, r in result["workers"].items()
    ]
    print_table(
        f"Loader throughput, batch 8, {result['rounds']} rounds of {result['batches_per_round']} "
        f"batches (load {result['load_average']})",
        ["workers", "samples/s (best)", "samples/s (median)", "ratio", "first batch s"],
        rows,
    )
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'throughput', result)}")
    return result


if __name__ == "__main__":
    main()
