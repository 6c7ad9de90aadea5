"""Vision-balance benchmark: vision work per data-parallel rank, length-only vs vision-balanced packing.

Run: ``python benchmarks/packing/vision_balance.py [--samples 40000] [--seed 0] [--json out.json]``.

A seeded stream of a realistic vision-language blend (dynamic resolution, 256-2,500 patches
per image, 4 patches per image token after a 2x2 merge):

- caption 35%: 1 image, 10-60 text tokens;
- VQA 30%: 1 image, 30-400 text tokens;
- multi-image 10%: 2-6 images, 50-500 text tokens;
- video 10%: 8-32 frames of 256-576 patches (a frame pair per temporal patch), 30-200 text tokens;
- text-only 15%: no patches, lognormal text around 1,200 tokens (at most the capacity).

The stream is cut into packing buffers and packed by ``first-fit-decreasing`` (length only)
and by ``vision-balanced`` (the same capacity and buffer; the patches of each sample given to
its ``plan``, as the task encoder does). The packs, in emission order, are dealt to 8
simulated data-parallel ranks, one pack per rank per step (micro batch 1): step ``s`` takes
packs ``8s .. 8s+7``. Per step: the largest rank's vision cost over the mean (median and p95
over steps), and the token fill ``tokens / (packs * capacity)``. A second table deals each
rank its own stream (independent loaders, as under Energon each rank reads its own shard),
with the ``auto`` budget and with a fixed ``vision_budget`` shared by every rank.
"""

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, write_json

import energon_plugins

BENCHMARK = {
    "name": "vision_balance",
    "full": ["--samples", "40000"],
    "quick": ["--samples", "4000"],
    "output": "file",
}

CAPACITY = 8192
BUFFER = 512
RANKS = 8
MERGE = 4  # patches per image token (2x2 spatial merge)


def image_patches(rng: random.Random) -> int:
    """Patches of one dynamic-resolution image: log-uniform in 256..2,500."""
    return int(math.exp(rng.uniform(math.log(256), math.log(2500))))


def draw_sample(rng: random.Random) -> tuple[int, list[int], str]:
    """One sample of the blend: ``(token length, patches per image/video, kind)``."""
    kind = rng.choices(["caption", "vqa", "multi", "video", "text"], [35, 30, 10, 10, 15])[0]
    if kind == "caption":
        patches, text = [image_patches(rng)], rng.randint(10, 60)
    elif kind == "vqa":
        patches, text = [image_patches(rng)], rng.randint(30, 400)
    elif kind == "multi":
        patches = [image_patches(rng) for _ in range(rng.randint(2, 6))]
        text = rng.randint(50, 500)
    elif kind == "video":
        patches, text = [rng.randint(8, 32) // 2 * rng.randint(256, 576)], rng.randint(30, 200)
    else:
        patches, text = [], min(CAPACITY, int(rng.lognormvariate(math.log(1200), 0.6)))
    length = min(CAPACITY, text + sum(-(-p // MERGE) for p in patches))
    return length, patches, kind


def draw_stream(count: int, seed: int) -> list[tuple[int, list[int], str]]:
    """``count`` seeded samples of the blend."""
    rng = random.Random(seed)
    return [draw_sample(rng) for _ in range(count)]


def pack_stream(strategy, stream, with_patches: bool) -> tuple[list[tuple[int, int]], float]:
    """Packs of ``stream`` as ``(tokens, vision cost)`` in emission order, and seconds spent planning."""
    packs = []
    seconds = 0.0
    for start in range(0, len(stream), BUFFER):
        buffer = stream[start : start + BUFFER]
        lengths = [length for length, _, _ in buffer]
        patches = [p for _, p, _ in buffer]
        began = time.perf_counter()
        plan = strategy.plan(lengths, CAPACITY, patches) if with_patches else strategy.plan(lengths, CAPACITY)
        seconds += time.perf_counter() - began
        for group in plan.groups:
            packs.append((sum(lengths[i] for i in group), sum(sum(patches[i]) for i in group)))
    return packs, seconds


def step_ratios(per_rank: list[list[int]]) -> list[float]:
    """max / mean vision cost across ranks, for every step all ranks reach."""
    steps = min(len(r) for r in per_rank)
    ratios = []
    for step in range(steps):
        loads = [r[step] for r in per_rank]
        mean = sum(loads) / len(loads)
        ratios.append(max(loads) / mean if mean else 1.0)
    return ratios


def summary(ratios: list[float], packs: list[tuple[int, int]], seconds: float, samples: int) -> dict:
    """Median and p95 of the per-step ratios, the fill, packs and planning time per sample."""
    ordered = sorted(ratios)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "fill": sum(t for t, _ in packs) / (len(packs) * CAPACITY),
        "packs": len(packs),
        "steps": len(ratios),
        "us_per_sample": seconds / samples * 1e6,
    }


def dealt(strategy, stream, with_patches: bool) -> dict:
    """One stream, its packs dealt round-robin to the ranks."""
    packs, seconds = pack_stream(strategy, stream, with_patches)
    per_rank = [[v for _, v in packs[r::RANKS]] for r in range(RANKS)]
    return summary(step_ratios(per_rank), packs, seconds, len(stream))


def independent(strategy, streams, with_patches: bool) -> dict:
    """Each rank packs its own stream; step s takes each rank's s-th pack."""
    results = [pack_stream(strategy, s, with_patches) for s in streams]
    per_rank = [[v for _, v in packs] for packs, _ in results]
    every = [p for packs, _ in results for p in packs]
    return summary(step_ratios(per_rank), every, sum(s for _, s in results), sum(map(len, streams)))


def main(argv=None) -> int:
    """Run the benchmark, print the tables and goals, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    stream = draw_stream(args.samples, args.seed)
    mean_vision = sum(sum(p) for _, p, _ in stream) / len(stream)
    print(
        f"{len(stream)} samples, mean length {sum(s[0] for s in stream) / len(stream):.0f} tokens, "
        f"mean {mean_vision:.0f} patches, capacity {CAPACITY}, buffer {BUFFER}, {RANKS} ranks, "
        f"seed {args.seed}"
    )
    ffd = energon_plugins.create("packing_strategy", "first-fit-decreasing")
    balanced = energon_plugins.create("packing_strategy", "vision-balanced")
    results = {"ffd": dealt(ffd, stream, False), "vision-balanced": dealt(balanced, stream, True)}

    streams = [draw_stream(args.samples // RANKS, args.seed * 1000 + 1 + r) for r in range(RANKS)]
    # one budget for every rank: the whole stream's mean vision cost per pack (length-only) x 1.05
    global_budget = math.ceil(mean_vision * len(stream) / results["ffd"]["packs"] * 1.05)
    fixed = energon_plugins.create("packing_strategy", "vision-balanced", {"vision_budget": global_budget})
    per_rank = {
        "ffd": independent(ffd, streams, False),
        "vision-balanced": independent(balanced, streams, True),
        f"vision-balanced, budget {global_budget}": independent(fixed, streams, True),
    }

    columns = ["strategy", "max/mean median", "max/mean p95", "fill", "packs", "steps", "µs/sample"]

    def rows(table):
        return [
            [
                name,
                f"{r['median']:.3f}",
                f"{r['p95']:.3f}",
                f"{r['fill']:.4f}",
                r["packs"],
                r["steps"],
                f"{r['us_per_sample']:.1f}",
            ]
            for name, r in table.items()
        ]

    print_table(
        "Vision cost per step across 8 ranks: one stream, packs dealt round-robin", columns, rows(results)
    )
    print_table("Each rank its own stream (independent loaders)", columns, rows(per_rank))

    base, mine = results["ffd"], results["vision-balanced"]
    goals = [
        (
            "vision-balanced max/mean vision cost per step (median) <= 1.1",
            mine["median"] <= 1.1,
            f"{mine['median']:.3f} (p95 {mine['p95']:.3f}) vs first-fit-decreasing "
            f"{base['median']:.3f} (p95 {base['p95']:.3f})",
        ),
        (
            "vision-balanced fill >= 0.97 x first-fit-decreasing's",
            mine["fill"] >= 0.97 * base["fill"],
            f"{mine['fill']:.4f} vs {base['fill']:.4f} (ratio {mine['fill'] / base['fill']:.4f})",
        ),
    ]
    print("Goals:")
    for label, ok, detail in goals:
        print("  " + goal_line(label, ok, detail))
    goal_records = [{"goal": g, "met": ok, "detail": d} for g, ok, d in goals]
    if args.json:
        path = write_json(
            args.json,
            "vision_balance",
            {
                "samples": len(stream),
                "seed": args.seed,
                "capacity": CAPACITY,
                "buffer": BUFFER,
                "ranks": RANKS,
                "dealt": results,
                "independent": per_rank,
                "goals": goal_records,
                "summary": goal_rows(goal_records),
            },
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
