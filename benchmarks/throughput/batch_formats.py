"""Batch formats: the loader's throughput with each format against the same loader without one.

Run: ``python benchmarks/throughput/batch_formats.py [--rounds 8] [--batches 10] [--json out.json] [--quick]``.

Every loader is ``EnergonMultiModalDataModule.from_config(config)`` on the shared demo pipeline
(0 workers, so all the work, the format's included, is in this process) and differs only in
``batch_format``: ``null`` (the baseline: the task encoder's batch as it is),
``megatron-bridge``, ``megatron-lm`` and ``hf``; unpacked (micro batch 8 of 320 tokens) and
packed (one row of 2,048 tokens per batch, about 30 samples). Two measurements, in one run:

- **in the loop** (the goal): the baseline loader is pulled ``--batches * --rounds`` times and
  each format is applied to every batch right there, as the loader's format stage does after
  ``encode_batch``; the CPU time of this thread in ``next()`` and in each format is summed
  (work of other threads is left out of both, which only makes the ratio stricter); the ratio
  is ``loop / (loop + format)``: the loader's throughput with the format over without it, on the
  very same batches, so other processes' load hardly moves it. Goal >= 0.98 (under 2%).
- **interleaved loaders** (a cross-check through the real stage): one loader per format and the
  baseline, rounds interleaved (the order alternates), ``--batches`` each after a warm-up;
  samples per second of CPU time, best round of each and the median of per-round ratios. On a
  shared machine its rounds scatter by several percent either way, more than the formats cost.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, write_json
from _shared.pipeline import interleave, load_average, prepare, quiet_loading, timed_batches

BENCHMARK = {"name": "batch_formats", "full": [], "quick": ["--quick"], "output": "file"}

GOAL_RATIO = 0.98
FORMATS = ("megatron-bridge", "megatron-lm", "hf")
#: The packed pipeline: rows of 2,048 tokens (a usual Megatron sequence length), one per batch.
PACKING = {
    "packing": {"name": "first-fit-decreasing"},
    "packing_buffer_size": 64,
    "micro_batch_size": 1,
    "seq_length": 2048,
}


def loader(config: dict, batch_format):
    """The training iterator of the datamodule built from ``config`` with ``batch_format``."""
    from energon_plugins import EnergonMultiModalDataModule

    selection = None if batch_format is None else {"name": batch_format}
    dm = EnergonMultiModalDataModule.from_config({**config, "batch_format": selection})
    return iter(dm.train_dataloader())


def in_loop(config: dict, batches: int) -> dict:
    """CPU seconds of ``batches`` pulls of the baseline loader and of each format on them."""
    import time

    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.loading.formatting import build_batch_format

    dm = EnergonMultiModalDataModule.from_config({**config, "batch_format": None})
    iterator = iter(dm.train_dataloader())
    formats = {name: build_batch_format(name, dm.build_context())[0] for name in FORMATS}
    timed_batches(iterator, 3)  # warm-up
    for fmt in formats.values():  # first calls resolve lazily held values
        fmt(next(iterator))
    loop = 0.0
    spent = dict.fromkeys(FORMATS, 0.0)
    clock = time.thread_time  # this thread's CPU time: other threads' work is not counted
    for _ in range(batches):
        started = clock()
        batch = next(iterator)
        loop += clock() - started
        for name, fmt in formats.items():
            started = clock()
            fmt(batch)
            spent[name] += clock() - started
    return {
        name: {
            "loop_cpu_s": round(loop, 4),
            "format_cpu_s": round(seconds, 5),
            "ratio": round(loop / (loop + seconds), 4),
            "format_ms_per_batch": round(1000 * seconds / batches, 4),
        }
        for name, seconds in spent.items()
    }


def compare(config: dict, rounds: int, batches: int) -> dict:
    """Interleaved rounds of the baseline loader and one loader per format over ``config``."""
    noop = lambda: None
    contenders = {"none": loader(config, None)}
    contenders.update({name: loader(config, name) for name in FORMATS})
    cpu = interleave({n: (it, noop) for n, it in contenders.items()}, rounds, batches)["cpu"]
    best = {n: max(v) for n, v in cpu.items()}
    out = {"cpu_samples_per_s": {n: round(v, 1) for n, v in best.items()}, "formats": {}}
    for name in FORMATS:
        out["formats"][name] = {
            "ratio_cpu": round(best[name] / best["none"], 4),
            "ratio_cpu_paired_median": round(
                statistics.median(x / y for x, y in zip(cpu[name], cpu["none"], strict=True)), 4
            ),
        }
    return out


def measure(rounds: int, batches: int, cache_dir: str | None = None) -> dict:
    """Both pipelines (unpacked, packed), both measurements; a JSON-ready dict."""
    config = prepare(cache_dir)
    out = {
        "rounds": rounds,
        "batches_per_round": batches,
        "load_average": load_average(),
        "micro_batch_size": config["micro_batch_size"],
        "goal_ratio": GOAL_RATIO,
    }
    with quiet_loading(1):
        for pipeline, settings in (("unpacked", config), ("packed", {**config, **PACKING})):
            out[pipeline] = compare(settings, rounds, batches)
            out[pipeline]["in_loop"] = in_loop(settings, rounds * batches)
    return out


def main(argv=None) -> dict:
    """Measure, print the table and the goals, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=10, help="batches per loader per round")
    parser.add_argument("--cache-dir", help="where the demo data and tokenizer are written")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", metavar="FILE", help="write the results to FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batches = 2, 2
    result = measure(args.rounds, args.batches, args.cache_dir)

    rows, goals = [], []
    for pipeline in ("unpacked", "packed"):
        part = result[pipeline]
        rows.append([f"{pipeline}: no format", "", "", part["cpu_samples_per_s"]["none"], "", ""])
        for name, figures in part["formats"].items():
            loop = part["in_loop"][name]
            rows.append(
                [
                    f"{pipeline}: {name}",
                    f"{loop['format_ms_per_batch']:.3f}",
                    f"{loop['ratio']:.4f}",
                    part["cpu_samples_per_s"][name],
                    f"{figures['ratio_cpu']:.3f}",
                    f"{figures['ratio_cpu_paired_median']:.3f}",
                ]
            )
            goals.append(
                {
                    "goal": f"{name} ({pipeline}): loader throughput with / without >= {GOAL_RATIO}",
                    "met": loop["ratio"] >= GOAL_RATIO,
                    "detail": f"{loop['ratio']:.4f} in the loop ({loop['format_ms_per_batch']:.3f} ms "
                    f"per batch); interleaved loaders {figures['ratio_cpu_paired_median']:.3f}"
                    f" (median of per-round ratios), {figures['ratio_cpu']:.3f} (best rounds)",
                }
            )
    print_table(
        f"Batch formats, 0 workers: {result['rounds'] * result['batches_per_round']} batches in "
        f"the loop; {result['rounds']} interleaved rounds of {result['batches_per_round']} "
        f"batches (load {result['load_average']})",
        [
            "loader",
            "format ms/batch",
            "ratio in the loop",
            "rows/s, interleaved (CPU, best)",
            "ratio (best)",
            "ratio (median)",
        ],
        rows,
    )
    result["goals"] = goals
    result["summary"] = goal_rows(goals)
    print("Goals:")
    for goal in goals:
        print("  " + goal_line(goal["goal"], goal["met"], goal["detail"]))
    if args.json:
        print(f"wrote {write_json(args.json, 'batch_formats', result)}")
    return result


if __name__ == "__main__":
    main()
