"""Framework overhead: the datamodule built from a config against a hand-wired Energon loader.

Run: ``python benchmarks/throughput/overhead.py [--rounds 8] [--batches 20] [--json out.json] [--quick]``.

Both loaders read the same demo metadataset with the same task encoder object (the one the
datamodule built from the config) and equal worker configs (0 workers, this process):

- ``framework``: ``EnergonMultiModalDataModule.from_config(config).train_dataloader()``;
- ``hand-wired``: ``get_train_dataset(path, split_part="train", batch_size, shuffle_buffer_size,
  max_samples_per_sequence, task_encoder=<same object>, worker_config=
  WorkerConfig.default_worker_config(0))`` + ``get_savable_loader``.

Rounds interleave the two (the order alternates), each pulling ``--batches`` batches after a
warm-up; throughput is samples per second of this process's CPU time (with 0 workers all the
work is in this process, and CPU time is far less disturbed by other processes on a shared
machine than wall time, which is reported too). Each contender's figure is its best round (as
``timeit`` takes the minimum: interference from other processes only ever adds time); the
ratio is framework / hand-wired of those, goal >= 0.98. The median of the per-round ratios is
reported next to it.

A second comparison, in the same run, reads the same pipeline with multi-storage-client's
per-read metrics bookkeeping (the default) and with it skipped
(:func:`energon_plugins.loading.storage.skip_unrecorded_local_metrics`), interleaved the same way; a
third does the same for reading and decoding alone (the VQA part, batches of decoded samples,
no task-encoder work), where the bookkeeping's share is largest.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, print_table, summary_row, write_json
from _shared.pipeline import interleave, load_average, prepare, quiet_loading, timed_batches

BENCHMARK = {"name": "overhead", "full": [], "quick": ["--quick"], "output": "file"}

GOAL_RATIO = 0.98


def build_loaders(config: dict):
    """``(datamodule, framework iterator, hand-wired iterator)`` over the same data and encoder."""
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    from energon_plugins import EnergonMultiModalDataModule

    dm = EnergonMultiModalDataModule.from_config(config)
    framework = iter(dm.train_dataloader())
    dataset = get_train_dataset(
        dm.path,
        split_part="train",
        batch_size=dm.micro_batch_size,
        shuffle_buffer_size=dm.shuffle_buffer_size,
        max_samples_per_sequence=dm.max_samples_per_sequence,
        packing_buffer_size=dm.packing_buffer_size,
        task_encoder=dm.task_encoder,
        worker_config=WorkerConfig.default_worker_config(dm.num_workers),
    )
    hand = iter(get_savable_loader(dataset))
    return dm, framework, hand


#: Files whose code runs only in the framework's loader (the task encoder is shared by both).
FRAMEWORK_ONLY = (
    "energon_plugins/loading/dataloader.py",
    "energon_plugins/loading/errors_policy.py",
    "energon_plugins/loading/transfer.py",
    "energon_plugins/loading/datamodule.py",
    "energon_plugins/loading/formatting.py",
    "energon_plugins/encoding/batch_formats/base.py",
    "energon_plugins/encoding/batch_formats/bridge.py",
    "energon_plugins/encoding/batch_formats/labels.py",
    "energon_plugins/encoding/batch_formats/visual_inputs.py",
)


def framework_own_share(iterator, batches: int) -> dict:
    """cProfile ``batches`` framework batches: own time of the framework-only layers / total.

    A deterministic view of the overhead (no other process's load in it): the time spent in
    the code the hand-wired loader does not run.
    """
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    timed_batches(iterator, batches)
    profiler.disable()
    stats = pstats.Stats(profiler)
    own = sum(
        tt
        for (file, _, _), (_, _, tt, _, _) in stats.stats.items()
        if file.replace("\\", "/").endswith(FRAMEWORK_ONLY)
    )
    return {
        "framework_own_s": round(own, 5),
        "profiled_s": round(stats.total_tt, 4),
        "share": round(own / stats.total_tt, 5),
        "batches": batches,
    }


def raw_reader(path: str, batch_size: int):
    """An iterator of batches of decoded samples (lists; no task-encoder work) of ``path``."""
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_savable_loader, get_train_dataset

    class Raw(DefaultTaskEncoder):
        def batch(self, samples):
            return samples

    dataset = get_train_dataset(
        path,
        split_part="train",
        batch_size=batch_size,
        shuffle_buffer_size=100,
        max_samples_per_sequence=None,
        task_encoder=Raw(),
        worker_config=WorkerConfig.default_worker_config(0),
    )
    return iter(get_savable_loader(dataset))


def _paired_ratio(series: dict, a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(series[a], series[b], strict=True))


def measure(rounds: int, batches: int, cache_dir: str | None = None) -> dict:
    """Both comparisons; a JSON-ready dict."""
    from energon_plugins.loading import storage

    config = prepare(cache_dir)
    noop = lambda: None
    was_skipped = storage.local_metrics_skipped()
    with quiet_loading(1):
        dm, framework, hand = build_loaders(config)
        overhead = interleave({"framework": (framework, noop), "hand-wired": (hand, noop)}, rounds, batches)
        own = framework_own_share(framework, batches)
        msc = interleave(
            {
                "msc metrics (default)": (hand, storage.restore_local_metrics),
                "msc metrics skipped": (hand, storage.skip_unrecorded_local_metrics),
            },
            rounds,
            batches,
        )
        raw = raw_reader(str(Path(config["path"]).parent / "vqa"), dm.micro_batch_size)
        msc_raw = interleave(
            {
                "raw reads, msc metrics (default)": (raw, storage.restore_local_metrics),
                "raw reads, msc metrics skipped": (raw, storage.skip_unrecorded_local_metrics),
            },
            rounds,
            batches * 2,
        )
    (storage.skip_unrecorded_local_metrics if was_skipped else storage.restore_local_metrics)()

    def summary(series, a, b):
        best_cpu = {k: max(v) for k, v in series["cpu"].items()}
        best_wall = {k: max(v) for k, v in series["wall"].items()}
        return {
            "cpu_samples_per_s": {k: round(v, 1) for k, v in best_cpu.items()},
            "wall_samples_per_s": {k: round(v, 1) for k, v in best_wall.items()},
            "cpu_samples_per_s_median": {k: round(statistics.median(v), 1) for k, v in series["cpu"].items()},
            "ratio_cpu": round(best_cpu[a] / best_cpu[b], 4),
            "ratio_wall": round(best_wall[a] / best_wall[b], 4),
            "ratio_cpu_paired_median": round(_paired_ratio(series["cpu"], a, b), 4),
            "ratio_cpu_rounds": [round(x / y, 4) for x, y in zip(series["cpu"][a], series["cpu"][b])],
        }

    return {
        "rounds": rounds,
        "batches_per_round": batches,
        "micro_batch_size": dm.micro_batch_size,
        "num_workers": dm.num_workers,
        "load_average": load_average(),
        "overhead": summary(overhead, "framework", "hand-wired"),
        "framework_own_time": own,
        "msc_metrics": summary(msc, "msc metrics skipped", "msc metrics (default)"),
        "msc_metrics_raw_reads": summary(
            msc_raw, "raw reads, msc metrics skipped", "raw reads, msc metrics (default)"
        ),
        "goal_ratio": GOAL_RATIO,
    }


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: rates, the goal ratio, own time, the MSC metrics' cost."""
    overhead = result["overhead"]
    rows = [
        summary_row(f"{name} samples/s (CPU time, 0 workers)", rate)
        for name, rate in overhead["cpu_samples_per_s"].items()
    ]
    rows.append(
        summary_row(
            "ratio framework / hand-wired (CPU, best rounds)",
            f"{overhead['ratio_cpu']:.3f} "
            f"(median of per-round ratios {overhead['ratio_cpu_paired_median']:.3f}; "
            f"wall {overhead['ratio_wall']:.3f})",
            f">= {result['goal_ratio']}",
            overhead["ratio_cpu"] >= result["goal_ratio"],
        )
    )
    own = result["framework_own_time"]
    rows.append(summary_row("framework-only layers' own time / loop time (cProfile)", f"{own['share']:.3%}"))
    for section, what in (
        ("msc_metrics", "whole pipeline"),
        ("msc_metrics_raw_reads", "read + decode only"),
    ):
        msc = result[section]
        rows.append(
            summary_row(
                f"MSC metrics skipped / default: {what} (CPU, best rounds)",
                f"{msc['ratio_cpu']:.3f} (median of per-round ratios {msc['ratio_cpu_paired_median']:.3f})",
            )
        )
    return rows


def main(argv=None) -> dict:
    """Measure, print the tables and the goal, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--batches", type=int, default=10, help="batches per loader per round")
    parser.add_argument("--cache-dir", help="where the demo data and tokenizer are written")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", metavar="FILE", help="write the results to FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batches = 2, 2
    result = measure(args.rounds, args.batches, args.cache_dir)

    rows = []
    for section, a, b in (
        ("overhead", "framework", "hand-wired"),
        ("msc_metrics", "msc metrics skipped", "msc metrics (default)"),
        ("msc_metrics_raw_reads", "raw reads, msc metrics skipped", "raw reads, msc metrics (default)"),
    ):
        s = result[section]
        for name in (a, b):
            rows.append([name, s["cpu_samples_per_s"][name], s["wall_samples_per_s"][name], "", ""])
        rows.append(
            [f"  ratio {a} / {b} (best rounds)", "", "", f"{s['ratio_cpu']:.3f}", f"{s['ratio_wall']:.3f}"]
        )
        rows.append(["  median of per-round ratios", "", "", f"{s['ratio_cpu_paired_median']:.3f}", ""])
    print_table(
        f"Loader overhead, 0 workers, batch {result['micro_batch_size']}, {result['rounds']} "
        f"interleaved rounds of {result['batches_per_round']} batches (load {result['load_average']})",
        ["loader", "samples/s (CPU, best)", "samples/s (wall, best)", "ratio (CPU)", "ratio (wall)"],
        rows,
    )
    ratio = result["overhead"]["ratio_cpu"]
    result["goals"] = [
        {
            "goal": f"framework / hand-wired throughput >= {GOAL_RATIO}",
            "met": ratio >= GOAL_RATIO,
            "detail": f"ratio {ratio:.3f} (CPU time, best rounds), "
            f"{result['overhead']['ratio_cpu_paired_median']:.3f} (median of per-round ratios), "
            f"{result['overhead']['ratio_wall']:.3f} (wall)",
        }
    ]
    print("Goals:")
    for goal in result["goals"]:
        print("  " + goal_line(goal["goal"], goal["met"], goal["detail"]))
    own = result["framework_own_time"]
    print(
        f"Framework-only layers (EnergonDataloader, skip counting, pinning): {own['share']:.3%} "
        f"of the loop's time under cProfile ({own['framework_own_s']} of {own['profiled_s']} s)"
    )
    gain = result["msc_metrics"]["ratio_cpu"]
    raw_gain = result["msc_metrics_raw_reads"]["ratio_cpu"]
    print(
        f"MSC metrics skipped: {gain:.3f}x the default throughput of the whole pipeline, "
        f"{raw_gain:.3f}x for reading and decoding alone (CPU time)"
    )
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'overhead', result)}")
    return result


if __name__ == "__main__":
    main()
