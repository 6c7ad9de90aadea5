"""Packing benchmark: fill ratio, packs and selection time of every packing strategy.

Run: ``python benchmarks/packing/packing.py [--samples 20000] [--seed 0] [--json out.json]``.

A seeded stream of sample lengths: 60% text-only samples (lognormal around 250 tokens),
40% image samples (576 or 1,152 image tokens plus lognormal text around 120), packed with a
capacity of 4,096 in buffers of 50, 200 and 1,000 samples. Each buffer is packed on its own
(the per-buffer bound ``total / (ceil(total / capacity) * capacity)`` caps the fill), and with
carry-over: the worst-filled pack of each buffer is held back and its samples are packed with
the next buffer; a sample carried ``--max-carries`` times is emitted regardless; at the end of
the stream the remainder is packed once more. Every sample is checked to be emitted exactly
once (or reported as dropped).
"""

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, write_json
from _shared.lengths import sample_lengths

import energon_plugins
from energon_plugins.encoding.packing.carry import split_carry

BENCHMARK = {
    "name": "packing",
    "full": ["--samples", "10000", "--repeats", "5"],
    "quick": ["--samples", "1000", "--repeats", "1"],
    "output": "file",
}

CAPACITY = 4096
BUFFER_SIZES = (50, 200, 1000)
STRATEGIES = ("none", "first-fit-decreasing", "best-fit-decreasing", "greedy-knapsack")


def split_buffers(lengths, buffer_size):
    """The stream cut into consecutive buffers of ``buffer_size`` samples."""
    return [lengths[i : i + buffer_size] for i in range(0, len(lengths), buffer_size)]


def time_strategies(strategies, lengths, buffer_size, repeats):
    """Best time per sample (µs) of each strategy, rounds interleaved so load hits all alike."""
    buffers = split_buffers(lengths, buffer_size)
    best = {name: math.inf for name in strategies}
    names = list(strategies)
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            plan = strategies[name].plan
            start = time.perf_counter()
            for buffer in buffers:
                plan(buffer, CAPACITY)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: seconds / len(lengths) * 1e6 for name, seconds in best.items()}


def run_independent(strategy, lengths, buffer_size):
    """Pack every buffer on its own; check it and return fill, packs and the bound."""
    buffers = split_buffers(lengths, buffer_size)
    plans = [strategy.plan(buffer, CAPACITY) for buffer in buffers]
    packs = real = bound_capacity = dropped = 0
    for buffer, plan in zip(buffers, plans):
        seen = sorted(i for g in plan.groups for i in g) + list(plan.dropped)
        assert sorted(seen) == list(range(len(buffer))), "a sample was lost or duplicated"
        kept = sum(min(buffer[i], CAPACITY) for g in plan.groups for i in g)
        for group in plan.groups:
            assert sum(min(buffer[i], CAPACITY) for i in group) <= CAPACITY
        packs += len(plan.groups)
        real += kept
        bound_capacity += math.ceil(kept / CAPACITY) * CAPACITY
        dropped += len(plan.dropped)
    return {
        "fill": real / (packs * CAPACITY),
        "packs": packs,
        "bound": real / bound_capacity,
        "min_packs": bound_capacity // CAPACITY,
        "dropped": dropped,
        "truncated": sum(1 for x in lengths if x > CAPACITY),
    }


def run_carry(strategy, lengths, buffer_size, max_carries, min_fill=0.995, carry_groups=1):
    """Pack with carry-over; return fill, packs, the most carries of a sample and a loss check."""
    carried: list[int] = []  # stream positions held back
    carries: dict[int, int] = {}
    emitted: list[int] = []
    packs = real = 0
    start = time.perf_counter()

    def emit(groups, ids):
        nonlocal packs, real
        for group in groups:
            packs += 1
            real += sum(min(lengths[ids[i]], CAPACITY) for i in group)
            emitted.extend(ids[i] for i in group)

    for begin in range(0, len(lengths), buffer_size):
        ids = carried + list(range(begin, min(begin + buffer_size, len(lengths))))
        buffer = [lengths[i] for i in ids]
        plan = strategy.plan(buffer, CAPACITY)
        pinned = [i for i, sid in enumerate(ids) if carries.get(sid, 0) >= max_carries]
        groups, keep = split_carry(
            plan.groups, buffer, CAPACITY, min_fill=min_fill, max_groups=carry_groups, pinned=pinned
        )
        emit(groups, ids)
        emitted.extend(ids[i] for i in plan.dropped)
        carried = [ids[i] for i in keep]
        for sid in carried:
            carries[sid] = carries.get(sid, 0) + 1
    if carried:  # end of the stream: pack what is left, carry nothing
        plan = strategy.plan([lengths[i] for i in carried], CAPACITY)
        emit(plan.groups, carried)
        emitted.extend(carried[i] for i in plan.dropped)
    elapsed = time.perf_counter() - start
    lost = len(lengths) - len(set(emitted))
    duplicated = len(emitted) - len(set(emitted))
    assert lost == 0 and duplicated == 0, f"carry-over lost {lost}, duplicated {duplicated}"
    total = sum(min(x, CAPACITY) for x in lengths)
    return {
        "fill": real / (packs * CAPACITY),
        "packs": packs,
        "stream_bound": total / (math.ceil(total / CAPACITY) * CAPACITY),
        "max_carries": max(carries.values(), default=0),
        "lost": lost,
        "us_per_sample": elapsed / len(lengths) * 1e6,
    }


def main(argv=None) -> int:
    """Run the benchmark, print the tables and goals, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=9, help="best-of rounds for timing")
    parser.add_argument("--max-carries", type=int, default=8)
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    lengths = sample_lengths(args.samples, args.seed)
    print(
        f"{len(lengths)} samples, mean length {sum(lengths) / len(lengths):.0f}, "
        f"capacity {CAPACITY}, seed {args.seed}, overlong {sum(x > CAPACITY for x in lengths)}"
    )
    strategies = {n: energon_plugins.create("packing_strategy", n) for n in STRATEGIES}
    results: dict[str, dict] = {}
    rows = []
    for buffer_size in BUFFER_SIZES:
        timings = time_strategies(strategies, lengths, buffer_size, args.repeats)
        for name, strategy in strategies.items():
            plain = run_independent(strategy, lengths, buffer_size)
            plain["us_per_sample"] = timings[name]
            carry = None
            if name != "none":
                carry = run_carry(strategy, lengths, buffer_size, args.max_carries)
            results[f"{name}@{buffer_size}"] = {"independent": plain, "carry_over": carry}
            rows.append(
                [
                    name,
                    buffer_size,
                    f"{plain['fill']:.4f}",
                    plain["packs"],
                    f"{plain['bound']:.4f}",
                    plain["min_packs"],
                    f"{plain['us_per_sample']:.2f}",
                    f"{carry['fill']:.4f}" if carry else "-",
                    carry["packs"] if carry else "-",
                    carry["max_carries"] if carry else "-",
                    carry["lost"] if carry else "-",
                ]
            )
    print_table(
        "Packing: per buffer, and with carry-over",
        [
            "strategy",
            "buffer",
            "fill",
            "packs",
            "per-buffer bound",
            "bound packs",
            "µs/sample",
            "fill carry",
            "packs carry",
            "max carries",
            "lost",
        ],
        rows,
    )

    goals = []
    for name in ("first-fit-decreasing", "best-fit-decreasing"):
        for buffer_size in BUFFER_SIZES:
            r = results[f"{name}@{buffer_size}"]["independent"]
            gap = 1 - r["fill"] / r["bound"]
            goals.append(
                (
                    f"{name} within 0.1% of the per-buffer bound at buffer {buffer_size}",
                    gap <= 0.001,
                    f"fill {r['fill']:.4f} vs bound {r['bound']:.4f} (gap {gap:.3%})",
                )
            )
        mine = results[f"{name}@1000"]["independent"]["us_per_sample"]
        ref = results["greedy-knapsack@1000"]["independent"]["us_per_sample"]
        goals.append(
            (
                f"{name} time per sample at buffer 1000 <= greedy-knapsack's",
                mine <= ref,
                f"{mine:.2f} vs {ref:.2f} µs (ratio {mine / ref:.2f})",
            )
        )
    for name in STRATEGIES[1:]:
        r = results[f"{name}@200"]["carry_over"]
        goals.append(
            (
                f"{name} with carry-over fill >= 0.995 at buffer 200, 0 lost",
                r["fill"] >= 0.995 and r["lost"] == 0,
                f"fill {r['fill']:.4f}, lost {r['lost']}, stream bound {r['stream_bound']:.4f}",
            )
        )
    print("Goals:")
    for label, ok, detail in goals:
        print("  " + goal_line(label, ok, detail))
    goal_records = [{"goal": g, "met": ok, "detail": d} for g, ok, d in goals]
    if args.json:
        path = write_json(
            args.json,
            "packing",
            {
                "samples": len(lengths),
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
