"""Restore latency on realistic data: restore to the first batch against a fresh start's.

Run: ``python benchmarks/throughput/loader.py [--after 40] [--rounds 3] [--workers 0,2] [--json FILE]
[--quick]``.

The ``qwen2-vl`` + ``fast-qwen2-vl`` pipeline on the realistic dataset (:mod:`_shared.realistic`),
without packing (micro batch 4) and with first-fit-decreasing packing (buffer 100, capacity
4,096), at 0 and 2 workers. A loader is advanced ``--after`` batches and its state saved; then
(a) a fresh loader's first batch is timed (build to first batch), (b) a fresh loader restores
the state and its first batch is timed (build + restore to first batch) and checked to be the
batch the uninterrupted loader gives next; ``--rounds`` interleaved pairs, medians. Two loader
settings:

- ``datamodule``: ``EnergonMultiModalDataModule.train_dataloader()`` as it is (its defaults,
  ``checkpoint_every_sec=0``, ``checkpoint_every_min_n_samples=1``: a worker checkpoint after
  every batch, so a restore replays at most one batch per worker);
- ``Energon's defaults``: the datamodule's dataset in ``get_savable_loader(dataset,
  checkpoint_every_sec=60)`` (a worker checkpoint every 60 s and 2 x workers batches, so a
  restore replays every batch each worker made since its start, up to 60 s of work).

With workers, what a restore costs beyond a fresh start: the replayed batches, plus refilling
the shuffle buffer and the packing buffer from their restore keys (random reads of the saved
samples and, with packing, their cheap pre-encoding: the images of a packing buffer are not
processed until their pack is chosen).
"""

import argparse
import gc
import os
import pickle
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, write_json
from _shared.realistic import qwen2_vl_config, realistic_dataset, saved_tokenizers

BENCHMARK = {"name": "loader", "full": [], "quick": ["--quick"], "output": "file"}

GOAL = 1.5
SETTINGS = {
    "datamodule": None,
    "Energon's defaults": {"checkpoint_every_sec": 60, "checkpoint_every_min_n_samples": None},
}


class _Loader:
    """One loader: the datamodule's, or its dataset in ``get_savable_loader(**checkpoints)``."""

    def __init__(self, path, tokenizer, workers, packing, checkpoints):
        from megatron.energon import get_savable_loader

        from energon_plugins import EnergonMultiModalDataModule

        self.dm = EnergonMultiModalDataModule.from_config(
            qwen2_vl_config(path, tokenizer, workers=workers, packing=packing)
        )
        if checkpoints is None:
            self.loader = self.dm.train_dataloader()
            self.save, self.restore = self.loader.save_state, self.loader.restore_state
        else:
            dataset = self.dm.datasets_provider(
                self.dm._build_worker_config(workers, split="train"), split="train"
            )
            self.loader = get_savable_loader(dataset, **checkpoints)
            self.save, self.restore = self.loader.save_state_rank, self.loader.restore_state_rank
        self.iterator = None

    def next(self):
        if self.iterator is None:
            self.iterator = iter(self.loader)
        return next(self.iterator)

    def close(self):
        self.iterator = None
        self.dm.train_dataloader_object = None
        self.loader = self.dm = None
        gc.collect()


def _first_batch(path, tokenizer, workers, packing, checkpoints, state=None):
    """Seconds from building a loader (and restoring ``state``) to its first batch; the batch."""
    start = time.perf_counter()
    loader = _Loader(path, tokenizer, workers, packing, checkpoints)
    if state is not None:
        loader.restore(pickle.loads(state))  # as from a checkpoint file, a fresh copy each time
    batch = loader.next()
    seconds = time.perf_counter() - start
    loader.close()
    return seconds, batch


def one(path, tokenizer, workers, packing, setting, after, rounds: int = 3) -> dict:
    checkpoints = SETTINGS[setting]
    run = _Loader(path, tokenizer, workers, packing, checkpoints)
    for _ in range(after):
        run.next()
    state = pickle.dumps(run.save())
    expected = run.next()
    run.close()

    # Interleaved rounds, the order alternating, medians: a single pair mostly measures the
    # full gc.collect() Energon's GcDataset runs at the start of every iteration, whose cost
    # depends on what the previous loader left to collect.
    fresh_times, restore_times, batch = [], [], None
    for r in range(rounds):
        for kind in ("fresh", "restore") if r % 2 == 0 else ("restore", "fresh"):
            if kind == "fresh":
                fresh_times.append(_first_batch(path, tokenizer, workers, packing, checkpoints)[0])
            else:
                seconds, batch = _first_batch(path, tokenizer, workers, packing, checkpoints, state)
                restore_times.append(seconds)
    fresh_s, restore_s = statistics.median(fresh_times), statistics.median(restore_times)
    exact = list(batch.__key__) == list(expected.__key__) and bool(
        (batch.input_ids == expected.input_ids).all()
    )
    return {
        "workers": workers,
        "packing": packing,
        "setting": setting,
        "after_batches": after,
        "fresh_first_batch_s": round(fresh_s, 2),
        "restore_to_first_batch_s": round(restore_s, 2),
        "ratio": round(restore_s / fresh_s, 2),
        "restored_batch_is_the_next_one": exact,
    }


def checkpoint_cost(path, tokenizer, rounds: int, seconds: float = 3.0) -> dict:
    """Samples/s at 2 workers: the datamodule (a checkpoint per batch) and Energon's defaults."""
    rates: dict[str, list[float]] = {setting: [] for setting in SETTINGS}
    for r in range(rounds):
        for setting in list(SETTINGS)[r % 2 :] + list(SETTINGS)[: r % 2]:
            run = _Loader(path, tokenizer, 2, False, SETTINGS[setting])
            for _ in range(5):  # workers started, prefetch queue drained
                run.next()
            samples, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                samples += len(run.next().__key__)
            rates[setting].append(samples / (time.perf_counter() - start))
            run.close()
    medians = {k: round(statistics.median(v), 2) for k, v in rates.items()}
    return {
        "samples_per_s": medians,
        "ratio": round(medians["datamodule"] / medians["Energon's defaults"], 3),
    }


def main(argv=None) -> dict:
    """Measure, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--after", type=int, default=40, help="batches before the save")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--rounds", type=int, default=3, help="fresh/restore pairs (medians)")
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.after, args.workers, args.samples, args.rounds = 3, "0", 48, 1

    import torch
    import torch.utils.data._utils as data_utils

    torch.set_num_threads(1)
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1
    warnings.filterwarnings("ignore")
    path = str(realistic_dataset(args.samples))
    tokenizer = saved_tokenizers()["qwen2"]
    rows = []
    for workers in (int(w) for w in args.workers.split(",")):
        for packing in (False, True):
            for setting in SETTINGS:
                if workers == 0 and setting != "datamodule":
                    continue  # checkpoints apply to workers only
                rows.append(one(path, tokenizer, workers, packing, setting, args.after, args.rounds))
    print_table(
        f"Restore after {args.after} batches: s to the first batch (qwen2-vl + fast-qwen2-vl)",
        ["workers", "packing", "loader", "fresh start", "restore", "ratio", "exact"],
        [
            [
                r["workers"],
                "FFD 100" if r["packing"] else "none",
                r["setting"],
                r["fresh_first_batch_s"],
                r["restore_to_first_batch_s"],
                r["ratio"],
                r["restored_batch_is_the_next_one"],
            ]
            for r in rows
        ],
    )
    goals = [
        {
            "goal": f"restore to first batch <= {GOAL}x a fresh start ({r['workers']} workers, "
            f"{'packing' if r['packing'] else 'no packing'}, {r['setting']})",
            "met": r["ratio"] <= GOAL and r["restored_batch_is_the_next_one"],
            "detail": f"{r['restore_to_first_batch_s']} s vs {r['fresh_first_batch_s']} s "
            f"({r['ratio']}x), exact: {r['restored_batch_is_the_next_one']}",
        }
        for r in rows
        if r["setting"] == "datamodule"
    ]  # the other rows: for reference
    for g in goals:
        print(goal_line(g["goal"], g["met"], g["detail"]))
    result = {"restore": rows, "goals": goals, "load_average": [round(v, 2) for v in os.getloadavg()]}
    if "2" in args.workers.split(","):
        cost = result["checkpoint_cost"] = checkpoint_cost(path, tokenizer, rounds=4)
        print(
            f"throughput at 2 workers, samples/s: {cost['samples_per_s']} "
            f"(datamodule, a checkpoint per batch / Energon's defaults: {cost['ratio']}x)"
        )
    result["summary"] = goal_rows(goals, f"<= {GOAL}x, exact")
    if args.json:
        print(f"wrote {write_json(args.json, 'loader', result)}")
    return result


if __name__ == "__main__":
    main()
