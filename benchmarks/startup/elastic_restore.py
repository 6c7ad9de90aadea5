"""Restore to the first batch on another number of ranks or workers, against a same-size restore.

Run: ``python benchmarks/startup/elastic_restore.py [--batches N] [--rounds R] [--samples S]
[--json FILE] [--quick]``.

A synthetic VQA dataset (``energon_plugins.synthetic.write_dataset``, 5 samples per shard) is
read by a realistic loader: 2 workers per rank, a shuffle buffer, first-fit-decreasing packing
with carry-over, micro batch 2, the CLIP image processor at its default size. Data-parallel
ranks are simulated in one process (each datamodule gets ``pg_collection.dp`` with its own
rank, as ``tests/loading/test_elastic_restore.py`` does). A run of 2 ranks x 2 workers reads
``--batches`` batches per rank and every rank writes its state file
(``loading.checkpoint.save_loader_state``). Then rank 0 of each layout is timed from building
the datamodule, through reading the state files (the restricted unpickler) and
``restore_state``, to its first batch:

- ``2x2``: the same size, restoring its own file (the baseline);
- ``1x2``, ``3x1``, ``4x1``: the list of both old ranks' files (elastic: the 4 data partitions
  of the old run are handed to the new workers; rank 0 of ``3x1`` runs two of them).

After one untimed restore (one-off costs), ``--rounds`` rounds, each timing every layout in a
rotated order; medians, and each elastic median as a ratio of the baseline median of the same
run (goal <= 1.5x; never asserted: the machine is shared). The seconds of the next few batches
after the first are printed too. Both checkpoint settings: the datamodule's default (a worker
checkpoint after every batch: a restore replays at most one batch per worker) and Energon's own
(every 60 s: a restore replays every batch since the start). Last, the cost of partitions per
worker: a fresh 1 x 2 loader with ``data_partitions`` = 4 x the workers (each worker
interleaving 4 partitions, each with its own shuffle and packing buffer) against one without
the setting: build to first batch, and the median seconds per batch after it. ``--quick``: 60
samples, 2 batches, 1 round, the datamodule's checkpoint setting only (a smoke test).
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared import CACHE_DIR
from _shared.common import goal_line, print_table, summary_row, write_json

BENCHMARK = {"name": "elastic_restore", "full": [], "quick": ["--quick"], "output": "file"}

GOAL = 1.5
OLD = (2, 2)
"""The layout that saves: 2 ranks x 2 workers (4 data partitions)."""
LAYOUTS = {"2x2": (2, 2), "1x2": (1, 2), "3x1": (3, 1), "4x1": (4, 1)}
"""Layouts restored into (ranks, workers); ``2x2`` restores its own state (the baseline)."""
BASELINE = "2x2"
SETTINGS: dict[str, dict[str, Any]] = {
    "datamodule default (0 s, 1 sample)": {"checkpoint_every_sec": 0, "checkpoint_every_min_n_samples": 1},
    "Energon's (60 s, None)": {"checkpoint_every_sec": 60, "checkpoint_every_min_n_samples": None},
}
"""Energon's worker-checkpoint settings: the datamodule's defaults and Energon's own."""
AFTER_FIRST = 4
"""Batches timed one by one after the first."""


class _Group:
    """The ``dp`` process group of a simulated rank: only ``rank()`` and ``size()``."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        """This rank."""
        return self._rank

    def size(self) -> int:
        """The number of data-parallel ranks."""
        return self._size


class Setup:
    """The dataset, tokenizer and image processor every loader of the run is built from."""

    def __init__(self, samples: int) -> None:
        """Write (or reuse) the dataset of ``samples`` samples; build the tokenizer and processor."""
        import transformers

        from energon_plugins.synthetic import build_demo_tokenizer, write_dataset

        self.path = write_dataset(
            CACHE_DIR / f"elastic-vqa-{samples}", kind="vqa", num_samples=samples, samples_per_shard=5
        ).path
        self.tokenizer = build_demo_tokenizer()
        self.processor = transformers.CLIPImageProcessor()

    def loader(self, rank: int, ranks: int, workers: int, checkpoints: dict, **extra: Any) -> Any:
        """Rank ``rank``'s training loader of a run of ``ranks`` x ``workers``."""
        from energon_plugins import EnergonMultiModalDataModule

        datamodule = EnergonMultiModalDataModule(
            self.path,
            self.tokenizer,
            self.processor,
            seq_length=1024,
            micro_batch_size=2,
            num_workers=workers,
            shuffle_buffer_size=20,
            packing={"name": "first-fit-decreasing", "options": {"carry_over": True}},
            packing_buffer_size=16,
            pg_collection=types.SimpleNamespace(dp=_Group(rank, ranks)),
            **checkpoints,
            **extra,
        )
        return datamodule.train_dataloader()


def keys(batch: Any) -> list[str]:
    """The sample keys of a megatron-bridge batch (a packed row joins its keys with commas)."""
    return [key for row in batch["__keys__"] for key in str(row).split(",") if key]


def _close(loader: Any) -> None:
    loader.close()
    gc.collect()


def save_run(setup: Setup, checkpoints: dict, batches: int, folder: Path) -> list[str]:
    """Every rank of the old layout reads ``batches`` batches and writes its state file; return
    the keys rank 0 reads next (what a same-size restore must give first)."""
    from energon_plugins.loading.checkpoint import save_loader_state

    expected: list[str] = []
    for rank in range(OLD[0]):
        loader = setup.loader(rank, *OLD, checkpoints)
        try:
            for _ in range(batches):
                next(loader)
            state = loader.save_state()
            save_loader_state(folder, state, dp_rank=rank, fingerprint=state["fingerprint"])
            if rank == 0:
                expected = keys(next(loader))
        finally:
            _close(loader)
    return expected


def time_restore(setup: Setup, checkpoints: dict, layout: str, folder: Path) -> dict[str, Any]:
    """Rank 0 of ``layout``: seconds from building to its first batch (state files read and
    restored on the way), the seconds of the next batches, the first batch's keys."""
    from energon_plugins.loading.checkpoint import state_path
    from energon_plugins.loading.safe_load import load_state_file

    ranks, workers = LAYOUTS[layout]
    start = time.perf_counter()
    loader = setup.loader(0, ranks, workers, checkpoints)
    try:
        if layout == BASELINE:
            loader.restore_state(load_state_file(state_path(folder, 0)))
        else:
            loader.restore_state([load_state_file(state_path(folder, r)) for r in range(OLD[0])])
        first = keys(next(loader))
        seconds = time.perf_counter() - start
        after = []
        for _ in range(AFTER_FIRST):
            tick = time.perf_counter()
            next(loader)
            after.append(time.perf_counter() - tick)
    finally:
        _close(loader)
    return {"seconds": seconds, "after": after, "first_keys": first}


def measure_setting(setup: Setup, setting: str, batches: int, rounds: int) -> dict[str, Any]:
    """Save a 2 x 2 run, then time every layout's restore ``rounds`` times (rotated order)."""
    checkpoints = SETTINGS[setting]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        expected = save_run(setup, checkpoints, batches, folder)
        time_restore(setup, checkpoints, BASELINE, folder)  # warm-up, untimed: one-off costs
        times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        after: dict[str, list[list[float]]] = {layout: [] for layout in LAYOUTS}
        exact = True
        order = list(LAYOUTS)
        for r in range(rounds):
            for layout in order[r % len(order) :] + order[: r % len(order)]:
                timed = time_restore(setup, checkpoints, layout, folder)
                times[layout].append(timed["seconds"])
                after[layout].append(timed["after"])
                if layout == BASELINE:
                    exact = exact and timed["first_keys"] == expected
    baseline = statistics.median(times[BASELINE])
    layouts = {}
    for layout, values in times.items():
        median = statistics.median(values)
        layouts[layout] = {
            "ranks_x_workers": list(LAYOUTS[layout]),
            "restore_to_first_batch_s": round(median, 3),
            "all_s": [round(v, 3) for v in values],
            "ratio": round(median / baseline, 2),
            "next_batches_s": [round(statistics.median(col), 3) for col in zip(*after[layout], strict=True)],
        }
    return {
        "setting": setting,
        "checkpoints": checkpoints,
        "batches_before_save": batches,
        "baseline_restores_the_next_batch": exact,
        "layouts": layouts,
    }


def partition_cost(setup: Setup, rounds: int, batches: int) -> dict[str, Any]:
    """A fresh 1 x 2 loader with ``data_partitions`` = 4 x workers against one without: build to
    first batch, and median seconds per batch over ``batches`` batches after it (medians)."""
    checkpoints = SETTINGS["datamodule default (0 s, 1 sample)"]
    workers = 2
    variants: dict[str, dict[str, Any]] = {
        "without": {},
        f"data_partitions={4 * workers}": {"data_partitions": 4 * workers},
    }
    build: dict[str, list[float]] = {v: [] for v in variants}
    per_batch: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in list(variants)[r % 2 :] + list(variants)[: r % 2]:
            start = time.perf_counter()
            loader = setup.loader(0, 1, workers, checkpoints, **variants[variant])
            try:
                next(loader)
                build[variant].append(time.perf_counter() - start)
                tick = time.perf_counter()
                for _ in range(batches):
                    next(loader)
                per_batch[variant].append((time.perf_counter() - tick) / batches)
            finally:
                _close(loader)
    figures: dict[str, dict[str, Any]] = {
        v: {
            "build_to_first_batch_s": round(statistics.median(build[v]), 3),
            "per_batch_s": round(statistics.median(per_batch[v]), 4),
            "all_s": [[round(b, 3), round(p, 4)] for b, p in zip(build[v], per_batch[v], strict=True)],
        }
        for v in variants
    }
    without, partitioned = (figures[v] for v in variants)
    return {
        "ranks_x_workers": [1, workers],
        "batches_timed": batches,
        "variants": figures,
        "build_ratio": round(partitioned["build_to_first_batch_s"] / without["build_to_first_batch_s"], 2),
        "batch_ratio": round(partitioned["per_batch_s"] / without["per_batch_s"], 2),
    }


def summary_rows(result: dict[str, Any]) -> list[list[Any]]:
    """The key figures for ``run_all.py``: each elastic restore against the same-size one."""
    rows = []
    for measured in result["settings"]:
        layouts = measured["layouts"]
        base = layouts[BASELINE]
        for layout, figures in layouts.items():
            if layout == BASELINE:
                continue
            rows.append(
                summary_row(
                    f"restore to first batch, 2x2 -> {layout} / 2x2 -> 2x2 ({measured['setting']})",
                    f"{figures['restore_to_first_batch_s']} / {base['restore_to_first_batch_s']} s "
                    f"({figures['ratio']}x)",
                    f"<= {GOAL}x",
                    figures["ratio"] <= GOAL,
                )
            )
    cost = result["partition_cost"]
    rows.append(
        summary_row(
            "data_partitions = 4 x workers / without (1x2): build to first batch; per batch",
            f"{cost['build_ratio']}x; {cost['batch_ratio']}x",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10, help="batches per rank before the save")
    parser.add_argument("--rounds", type=int, default=3, help="timings of each layout (medians)")
    parser.add_argument("--samples", type=int, default=200, help="samples in the dataset")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    settings_run = list(SETTINGS)
    if args.quick:
        args.batches, args.rounds, args.samples = 2, 1, 60
        settings_run = settings_run[:1]

    import torch
    import torch.utils.data._utils as data_utils

    torch.set_num_threads(1)
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1  # workers shut down without a 5 s wait
    warnings.filterwarnings("ignore")
    setup = Setup(args.samples)
    settings = [measure_setting(setup, setting, args.batches, args.rounds) for setting in settings_run]
    for measured in settings:
        print_table(
            f"2x2 saved after {args.batches} batches per rank, {measured['setting']}: rank 0, s from "
            f"build to first batch (median of {args.rounds})",
            ["layout", "restore", "ratio", "each", "next batches, s"],
            [
                [
                    f"{layout}{' (own state)' if layout == BASELINE else ' (list)'}",
                    f["restore_to_first_batch_s"],
                    f"{f['ratio']}x",
                    " ".join(map(str, f["all_s"])),
                    " ".join(map(str, f["next_batches_s"])),
                ]
                for layout, f in measured["layouts"].items()
            ],
        )
        print(
            f"  same-size restore gave the batch the saved run read next: {measured['baseline_restores_the_next_batch']}"
        )
        for layout, f in measured["layouts"].items():
            if layout != BASELINE:
                print(
                    goal_line(
                        f"elastic {layout} <= {GOAL}x same-size",
                        f["ratio"] <= GOAL,
                        f"{f['restore_to_first_batch_s']} vs {measured['layouts'][BASELINE]['restore_to_first_batch_s']} s "
                        f"({f['ratio']}x)",
                    )
                )
    cost = partition_cost(setup, args.rounds, 5 if args.quick else 20)
    print_table(
        f"Partitions per worker, fresh 1x2 loader (median of {args.rounds})",
        ["loader", "build to first batch, s", "per batch, s"],
        [[v, f["build_to_first_batch_s"], f["per_batch_s"]] for v, f in cost["variants"].items()]
        + [["ratio", f"{cost['build_ratio']}x", f"{cost['batch_ratio']}x"]],
    )
    result = {
        "settings": settings,
        "partition_cost": cost,
        "samples": args.samples,
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'elastic_restore', result)}")
    return result


if __name__ == "__main__":
    main()
