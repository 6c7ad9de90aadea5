"""Validation passes at 0 workers beside a model-sized heap: the project's freeze rule against
Energon's validation loader in the main process.

Run: ``python benchmarks/memory/validation_heap.py [--objects N] [--rounds R] [--json FILE]``.

Energon's ``GcDataset`` collects every 10 batches. A validation loader in the main process does
not freeze the heap itself (the end of its pass would unfreeze the training loader's), so in
an evaluation-only run every collection scans every object of the process. The project freezes
the heap for a pass when nothing has it frozen (``energon_plugins.loading.heap``). This script
builds the demo datamodule (``multimodal`` + ``hf`` CLIP, 0 workers), adds ``--objects`` small
Python objects as a stand-in for a training process's heap (modules, parameters, hooks:
transformers, torch and megatron-core alone bring about 800,000), and times whole validation
passes with the rule and without it (each pass through the same loader), in interleaved
rounds; the figure is the ratio of the median pass times.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json

BENCHMARK = {"name": "validation_heap", "full": [], "quick": ["--quick"], "output": "file"}


def summary_rows(figures: dict) -> list[list]:
    """The key figure for ``run_all.py``: seconds per pass without and with the freeze rule."""
    return [
        summary_row(
            f"validation pass at 0 workers beside ~{figures['objects_in_process']:,} objects: "
            "Energon (no freeze) / with the freeze rule, s",
            " / ".join(f"{v:.3f}" for v in figures["median_pass_seconds"].values())
            + f" ({figures['speedup']}x)",
        )
    ]


def main() -> None:
    """Time the passes and print (or write) the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.objects, args.rounds = 10_000, 1

    import gc

    import torch

    import energon_plugins
    from energon_plugins.cli.demo_cmd import prepare_demo_data
    from energon_plugins.loading import validation

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        paths = prepare_demo_data(str(Path(tmp) / "demo"))
        dm = energon_plugins.EnergonMultiModalDataModule.from_config(
            {
                "path": paths["path"],
                "tokenizer": {"path": paths["tokenizer"]},
                "seq_length": 512,
                "micro_batch_size": 4,
                "num_workers": 0,
            }
        )
        val = dm.val_dataloader()
        heap_stand_in = [{"i": [i, str(i)]} for i in range(args.objects)]
        rule = validation.frozen_for_pass

        def one_pass(with_rule: bool) -> tuple[float, int]:
            validation.frozen_for_pass = rule if with_rule else (lambda loader: loader)
            try:
                start = time.perf_counter()
                batches = sum(1 for _ in val.one_pass())
                return time.perf_counter() - start, batches
            finally:
                validation.frozen_for_pass = rule

        one_pass(True)  # warm-up: first decode, caches
        times: dict[str, list[float]] = {"Energon (no freeze)": [], "with the freeze rule": []}
        batches = 0
        for _ in range(args.rounds):
            seconds, batches = one_pass(False)
            times["Energon (no freeze)"].append(seconds)
            seconds, batches = one_pass(True)
            times["with the freeze rule"].append(seconds)
        objects = len(gc.get_objects()) + gc.get_freeze_count()
        del heap_stand_in
    medians = {k: statistics.median(v) for k, v in times.items()}
    ratio = medians["Energon (no freeze)"] / medians["with the freeze rule"]
    print_table(
        f"validation pass at 0 workers, {batches} batches, about {objects:,} objects in the process",
        ["loader", "median s per pass", "range s"],
        [[name, f"{medians[name]:.3f}", f"{min(v):.3f}-{max(v):.3f}"] for name, v in times.items()],
    )
    print(f"passes with the freeze rule are {ratio:.2f}x faster")
    figures = {
        "batches_per_pass": batches,
        "objects_in_process": objects,
        "median_pass_seconds": {k: round(v, 4) for k, v in medians.items()},
        "speedup": round(ratio, 3),
    }
    if args.json:
        write_json(args.json, "validation_heap", {**figures, "summary": summary_rows(figures)})


if __name__ == "__main__":
    main()
