"""Packing through the real encoder path: fill ratio with and without carry-over.

Run: ``python benchmarks/packing/packing_encoder.py [--samples 6000] [--dataset-size 4000] [--seed 0]
[--json out.json]``.

Writes a VQA dataset with Energon's prepare API (``energon_plugins.synthetic.write_dataset``)
and reads it through ``EnergonMultiModalDataModule`` and Energon's savable loader, with a
:class:`~energon_plugins.PluginTaskEncoder` whose ``encode_sample`` gives each sample the
length that ``benchmarks/packing/packing.py`` draws for its index (60% text around 250 tokens, 40%
576 or 1,152 image tokens plus text around 120; capacity 4,096). Packing is the encoder's own
(``select_samples_to_pack`` / ``pack_selected_samples`` in Energon's ``PackingDataset``, or the
carry-over stage). The loader runs until about ``--samples`` samples have been packed (the
training stream repeats, so no end-of-pass flush distorts the figure); the fill ratio is real
tokens over ``packs x 4,096`` as counted by the encoder (``packing_counts()``), and every pack
of every batch is checked against the capacity.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, write_json
from _shared.lengths import sample_lengths

BENCHMARK = {
    "name": "packing_encoder",
    "full": [],
    "quick": ["--samples", "300", "--dataset-size", "400"],
    "output": "file",
}

CAPACITY = 4096
BUFFER_SIZES = (50, 200, 1000)
STRATEGIES = ("first-fit-decreasing", "greedy-knapsack")


def make_encoder(context, lengths):
    """A PluginTaskEncoder whose samples have the benchmark's lengths (by sample index)."""
    import torch
    from megatron.energon import stateless

    from energon_plugins import EncodedSample, PluginTaskEncoder

    class LengthEncoder(PluginTaskEncoder):
        """Token ids 0..n-1 for a sample of length n (the length drawn for its index)."""

        @stateless
        def encode_sample(self, sample):
            n = lengths[int(sample.__key__.rsplit("-", 1)[1])]
            ids = torch.arange(n, dtype=torch.long) % 30_000
            return EncodedSample.derive_from(
                sample,
                input_ids=ids,
                labels=ids.clone(),
                loss_mask=torch.ones(n),
                seq_lengths=[n],
            )

    return LengthEncoder(context)


def run(path, lengths, name, buffer_size, carry, samples):
    """Pull packed batches until ``samples`` samples were packed; return the figures."""
    import energon_plugins

    packing = energon_plugins.create("packing_strategy", name, {"carry_over": carry})
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path),
        None,
        None,
        seq_length=CAPACITY,
        micro_batch_size=1,
        num_workers=0,
        shuffle_buffer_size=100,
        packing_buffer_size=buffer_size,
        packing=packing,
        batch_format=None,  # the encoder's packed batches, read below
    )
    encoder = make_encoder(dm.build_context("train"), lengths)
    dm.task_encoder = encoder
    loader = dm.train_dataloader()
    start = time.perf_counter()
    while encoder.packing_counts().get("samples", 0) < samples:
        batch = next(loader)
        cu = batch.packed_seq_params.cu_seqlens_q
        assert int(cu[-1]) == CAPACITY, "one row of seq_length tokens"
    elapsed = time.perf_counter() - start
    stats = encoder.packing_counts()
    return {
        "fill": stats["tokens"] / (stats["packs"] * CAPACITY),
        "packs": stats["packs"],
        "samples": stats["samples"],
        "carried": stats.get("carried", 0),
        "lost": sum(encoder.error_counts().values()),
        "samples_per_s": stats["samples"] / elapsed,
    }


def main(argv=None) -> int:
    """Write the dataset, run every strategy x buffer x carry-over, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=6000, help="samples packed per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset-size", type=int, default=4000, help="samples in the dataset")
    parser.add_argument("--data", help="dataset folder (default: a temporary one)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    from energon_plugins.synthetic import write_dataset

    dataset_size = args.dataset_size
    lengths = sample_lengths(dataset_size, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data) if args.data else Path(tmp) / "vqa"
        info = write_dataset(
            root,
            kind="vqa",
            num_samples=dataset_size,
            samples_per_shard=100,
            split_ratio=(("train", 1.0),),
            image_size=(8, 8),
            seed=args.seed,
        )
        print(
            f"dataset: {dataset_size} samples at {info.path}; {args.samples} samples "
            f"packed per run, capacity {CAPACITY}"
        )
        results = {}
        rows = []
        for buffer_size in BUFFER_SIZES:
            for name in STRATEGIES:
                for carry in (False, True):
                    r = run(info.path, lengths, name, buffer_size, carry, args.samples)
                    results[f"{name}@{buffer_size}{'+carry' if carry else ''}"] = r
                    rows.append(
                        [
                            name,
                            buffer_size,
                            "yes" if carry else "no",
                            f"{r['fill']:.4f}",
                            r["packs"],
                            r["samples"],
                            r["carried"],
                            r["lost"],
                            f"{r['samples_per_s']:.0f}",
                        ]
                    )
    print_table(
        "Packing through the encoder (EnergonMultiModalDataModule, Energon loader)",
        ["strategy", "buffer", "carry-over", "fill", "packs", "samples", "carried", "lost", "samples/s"],
        rows,
    )
    goals = []
    for name in STRATEGIES:
        r = results[f"{name}@200+carry"]
        goals.append(
            (
                f"{name} with carry-over through the encoder: fill >= 0.995 at buffer 200, 0 lost",
                r["fill"] >= 0.995 and r["lost"] == 0,
                f"fill {r['fill']:.4f} (without: {results[f'{name}@200']['fill']:.4f}), lost {r['lost']}",
            )
        )
    print("Goals:")
    for label, ok, detail in goals:
        print("  " + goal_line(label, ok, detail))
    goal_records = [{"goal": g, "met": ok, "detail": d} for g, ok, d in goals]
    if args.json:
        path = write_json(
            args.json,
            "packing_encoder",
            {
                "samples": args.samples,
                "seed": args.seed,
                "capacity": CAPACITY,
                "results": results,
                "goals": goal_records,
                "summary": goal_rows(goal_records),
            },
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
