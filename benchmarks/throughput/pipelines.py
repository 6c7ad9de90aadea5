"""The project's pipelines against the hand-written one, on realistic data, at 0 and 2 workers.

Run: ``python benchmarks/throughput/pipelines.py [--rounds 5] [--batches 6] [--workers 0,2] [--json FILE]
[--quick]``.

Data: :func:`_shared.realistic.realistic_dataset` (photographs-like JPEGs, 400-1600 px on the long
side, 30-300 word answers, Energon's own prepare). Baseline: :mod:`_shared.handwritten` (Energon
loader + ``SampleDecoder(image_decode="pil")`` + transformers' processor with its default,
torchvision backend + tokenizer), same prompts and outputs. Contenders, per model family:

- LLaVA-1.5 (CLIP 336 px crop, 576 image tokens): hand-written ``CLIPImageProcessor``;
  ``llava`` + ``fast-clip`` (default options: transformers' default backend's resize);
  ``llava`` + ``hf`` ``CLIPImageProcessor``; ``llava`` + ``fast-clip`` with ``jpeg_draft``;
- Qwen2-VL (transformers' default 3,136-1,003,520 pixels): hand-written
  ``Qwen2VLImageProcessor``; ``qwen2-vl`` + ``fast-qwen2-vl``; ``qwen2-vl`` + the ``qwen2-vl``
  (transformers) processor; ``qwen2-vl`` + ``fast-qwen2-vl`` + first-fit-decreasing packing
  (capacity 4,096, buffer 100, one packed row per batch).

Each round builds every contender's loader afresh (the order rotates between rounds), times
the first batch (build to first batch: the time to first batch), pulls ``--warmup`` more
batches (workers started, prefetch queues drained), then times samples over at least ``--batches``
batches and 3 s (packed rows: their sub-samples) by wall clock, and counts the CPU time this process
and its loader workers spent meanwhile (samples per CPU second: what the work costs, less
disturbed by other processes on a shared machine than the wall clock). Each figure is the
**median** of the rounds; ratios are medians of the same run (and the median of per-round
ratios is kept). Torch threads: 1 in the main process, as in every loader worker.
"""

import argparse
import gc
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, summary_row, write_json
from _shared.realistic import image_stats, realistic_dataset, saved_tokenizers

BENCHMARK = {"name": "pipelines", "full": [], "quick": ["--quick"], "output": "file"}

SEQ = 2048
MBS = 4
PACK_SEQ = 4096
PACK_BUFFER = 100
CLIP_336 = {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336}}
GOALS = {"llava": 1.5, "qwen": 2.0}
MIN_SECONDS = 3.0
"""Each timed window lasts at least this long (a few batches at 2 workers pass in a blink)."""
PACKING_GOAL = 0.95


def contenders(path: str, tokenizers: dict[str, str], quick: bool) -> dict[str, dict[str, Any]]:
    """family -> name -> spec: ``{"kind": "hand"|"project", ...}``; the first is the baseline."""
    fast_clip = {"name": "fast-clip", "options": {"size": {"shortest_edge": 336}, "crop_size": 336}}
    llava = {
        "hand-written (CLIPImageProcessor, torchvision)": {
            "kind": "hand",
            "family": "llava",
            "processor_kwargs": CLIP_336,
        },
        "llava + fast-clip": {"kind": "project", "encoder": "llava", "processor": fast_clip},
        "llava + hf CLIPImageProcessor": {
            "kind": "project",
            "encoder": "llava",
            "processor": {"name": "hf", "options": {"class_name": "CLIPImageProcessor", "kwargs": CLIP_336}},
        },
        "llava + fast-clip (jpeg_draft)": {
            "kind": "project",
            "encoder": "llava",
            "processor": {"name": "fast-clip", "options": {**fast_clip["options"], "jpeg_draft": True}},
        },
    }
    qwen = {
        "hand-written (Qwen2VLImageProcessor, torchvision)": {"kind": "hand", "family": "qwen2"},
        "qwen2-vl + fast-qwen2-vl": {
            "kind": "project",
            "encoder": "qwen2-vl",
            "processor": {"name": "fast-qwen2-vl"},
        },
        "qwen2-vl + hf qwen2-vl": {
            "kind": "project",
            "encoder": "qwen2-vl",
            "processor": {"name": "qwen2-vl"},
        },
        "qwen2-vl + fast-qwen2-vl + FFD packing": {
            "kind": "project",
            "encoder": "qwen2-vl",
            "processor": {"name": "fast-qwen2-vl"},
            "packing": True,
        },
    }
    if quick:
        llava = dict(list(llava.items())[:2])
        qwen = {k: v for k, v in qwen.items() if "hf" not in k}
    return {"llava": llava, "qwen": qwen}


def build(spec: dict[str, Any], path: str, tokenizers: dict[str, str], workers: int) -> Any:
    """A fresh loader for one contender."""
    if spec["kind"] == "hand":
        from _shared.handwritten import hand_written_loader

        return hand_written_loader(
            path,
            spec["family"],
            tokenizers[spec["family"]],
            workers=workers,
            micro_batch_size=MBS,
            seq_length=SEQ,
            shuffle_buffer_size=100,
            processor_kwargs=spec.get("processor_kwargs"),
        )
    from energon_plugins import EnergonMultiModalDataModule

    family = "llava" if spec["encoder"] == "llava" else "qwen2"
    config = {
        "path": path,
        "seq_length": SEQ,
        "micro_batch_size": MBS,
        "global_batch_size": MBS,
        "num_workers": workers,
        "shuffle_buffer_size": 100,
        "tokenizer": {"path": tokenizers[family]},
        "image_processor": spec["processor"],
        "task_encoder": {"name": spec["encoder"]},
        # the encoder's batch, compared field by field with the hand-written loop's (the
        # batch formats' own cost is benchmarks/throughput/batch_formats.py)
        "batch_format": None,
    }
    if spec.get("packing"):
        config.update(
            seq_length=PACK_SEQ,
            micro_batch_size=1,
            global_batch_size=1,
            packing_buffer_size=PACK_BUFFER,
            packing={"name": "first-fit-decreasing"},
        )
    return EnergonMultiModalDataModule.from_config(config).train_dataloader()


def samples_in(batch: Any) -> int:
    """Samples in a batch; a packed row counts its sub-samples."""
    return sum(len(str(key).split(",")) for key in batch.__key__)


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its live children (loader workers)."""
    total = time.process_time()
    ticks = os.sysconf("SC_CLK_TCK")
    pid = os.getpid()
    try:
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return total
    for child in children:
        try:
            fields = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total


def one_round(
    spec, path, tokenizers, workers, batches, warmup, min_seconds: float = MIN_SECONDS
) -> dict[str, float]:
    """First-batch seconds, and samples per second of wall and of CPU time, of a fresh loader."""
    start = time.perf_counter()
    iterator = iter(build(spec, path, tokenizers, workers))
    next(iterator)
    first = time.perf_counter() - start
    for _ in range(warmup):
        next(iterator)
    samples = 0
    start, cpu = time.perf_counter(), cpu_seconds()
    # At least ``batches`` batches' worth of samples and MIN_SECONDS of wall time.
    while samples < batches * MBS or time.perf_counter() - start < min_seconds:
        samples += samples_in(next(iterator))
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    del iterator
    gc.collect()
    return {
        "first_batch_s": first,
        "samples_per_s": samples / seconds,
        "samples_per_cpu_s": samples / max(cpu, 1e-9),
    }


def measure(
    family_specs, path, tokenizers, workers, rounds, batches, min_seconds: float = MIN_SECONDS
) -> dict[str, Any]:
    """Interleaved rounds of every contender of one family at ``workers`` workers."""
    names = list(family_specs)
    per_round: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    warmup = 2 * workers + 1  # the prefetch queue (2 per worker) is drained before timing
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            per_round[name].append(
                one_round(family_specs[name], path, tokenizers, workers, batches, warmup, min_seconds)
            )
    baseline = names[0]
    out = {}
    for name in names:
        rates = [x["samples_per_s"] for x in per_round[name]]
        ratios = [
            x["samples_per_s"] / b["samples_per_s"] for x, b in zip(per_round[name], per_round[baseline])
        ]
        cpu_rates = [x["samples_per_cpu_s"] for x in per_round[name]]
        out[name] = {
            "samples_per_cpu_s_median": round(statistics.median(cpu_rates), 2),
            "cpu_ratio_to_hand_written": round(
                statistics.median(cpu_rates)
                / statistics.median(x["samples_per_cpu_s"] for x in per_round[baseline]),
                3,
            ),
            "samples_per_s_median": round(statistics.median(rates), 2),
            "samples_per_s_rounds": [round(v, 2) for v in rates],
            "first_batch_s_median": round(statistics.median(x["first_batch_s"] for x in per_round[name]), 2),
            "ratio_to_hand_written": round(
                statistics.median(rates) / statistics.median(x["samples_per_s"] for x in per_round[baseline]),
                3,
            ),
            "ratio_per_round_median": round(statistics.median(ratios), 3),
        }
    return out


def check_outputs(path, tokenizers) -> dict[str, Any]:
    """The hand-written and the project's first batch (0 workers): same ids, pixel difference."""
    specs = contenders(path, tokenizers, quick=True)
    result = {}
    for family, named in specs.items():
        hand, project = list(named.values())[:2]
        a = next(iter(build(hand, path, tokenizers, 0)))
        b = next(iter(build(project, path, tokenizers, 0)))
        same_keys = list(a.__key__) == list(b.__key__)
        differ = (a.labels != b.labels) if same_keys else None
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizers["llava" if family == "llava" else "qwen2"])
        result[family] = {
            "same_samples": same_keys,
            "input_ids_identical": same_keys and bool((a.input_ids == b.input_ids).all()),
            "labels_identical": same_keys and not bool(differ.any()),
            "labels_differ_on": sorted({tok.decode([int(t)]) for t in a.input_ids[differ]})
            if same_keys
            else None,
            "pixel_values_max_abs_diff": round(float((a.pixel_values - b.pixel_values).abs().max()), 6)
            if a.pixel_values.shape == b.pixel_values.shape
            else "shapes differ",
        }
        gc.collect()
    return result


def main(argv=None) -> dict:
    """Measure, print the tables and the goals, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=6, help="timed batches of 4 samples")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--samples", type=int, default=240, help="samples in the dataset")
    parser.add_argument("--families", default="llava,qwen", help="model families to measure")
    parser.add_argument(
        "--min-seconds", type=float, default=MIN_SECONDS, help="shortest timed window per round"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batches, args.workers, args.samples = 1, 1, "0", 48
        args.min_seconds = 0.0

    import torch
    import torch.utils.data._utils as data_utils

    torch.set_num_threads(1)
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1  # loaders with workers shut down in 0.1 s
    warnings.filterwarnings("ignore")

    path = str(realistic_dataset(args.samples))
    tokenizers = saved_tokenizers()
    result: dict[str, Any] = {
        "data": {"samples": args.samples, **image_stats(Path(path))},
        "seq_length": SEQ,
        "micro_batch_size": MBS,
        "packing": {"seq_length": PACK_SEQ, "buffer": PACK_BUFFER},
        "load_average_before": [round(v, 2) for v in os.getloadavg()],
        "outputs": check_outputs(path, tokenizers),
        "families": {},
    }
    specs = contenders(path, tokenizers, args.quick)
    specs = {f: specs[f] for f in args.families.split(",")}
    for family, named in specs.items():
        for workers in (int(w) for w in args.workers.split(",")):
            figures = measure(named, path, tokenizers, workers, args.rounds, args.batches, args.min_seconds)
            result["families"].setdefault(family, {})[str(workers)] = figures
            print_table(
                f"{family}, {workers} workers: median of {args.rounds} interleaved rounds "
                f"({args.batches} batches of {MBS}; data {result['data']})",
                [
                    "pipeline",
                    "samples/s",
                    "x hand-written",
                    "per-round ratio",
                    "samples / CPU s",
                    "x hand-written (CPU)",
                    "first batch s",
                ],
                [
                    [
                        n,
                        f["samples_per_s_median"],
                        f["ratio_to_hand_written"],
                        f["ratio_per_round_median"],
                        f["samples_per_cpu_s_median"],
                        f["cpu_ratio_to_hand_written"],
                        f["first_batch_s_median"],
                    ]
                    for n, f in figures.items()
                ],
            )
    result["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
    result["goals"] = goals(result)
    for g in result["goals"]:
        print(goal_line(g["goal"], g["met"], g["detail"]))
    print(f"outputs (first batch, 0 workers): {result['outputs']}")
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'pipelines', result)}")
    return result


def summary_rows(result: dict[str, Any]) -> list[list]:
    """The key figures for ``run_all.py``: every pipeline's rate, the goals, the output check."""
    rows = []
    for by_workers in result["families"].values():
        for workers, figures in by_workers.items():
            base = next(iter(figures))
            for name, f in figures.items():
                rows.append(
                    summary_row(
                        f"{name}, {workers} workers: samples/s (x {base}; first batch)",
                        f"{f['samples_per_s_median']} ({f['ratio_to_hand_written']}x; "
                        f"{f['first_batch_s_median']} s)",
                    )
                )
    rows += goal_rows(result["goals"])
    for family, check in result["outputs"].items():
        rows.append(
            summary_row(
                f"{family}: same outputs as the hand-written pipeline (first batch)",
                f"ids identical {check['input_ids_identical']}, labels identical "
                f"{check['labels_identical']} (differ on tokens {check.get('labels_differ_on')}), "
                f"max pixel diff {check['pixel_values_max_abs_diff']}",
            )
        )
    return rows


def goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, judged on this run's medians."""
    out = []
    main_of = {"llava": "llava + fast-clip", "qwen": "qwen2-vl + fast-qwen2-vl"}
    for family, by_workers in result["families"].items():
        for workers, figures in by_workers.items():
            name = main_of[family]
            if name in figures:
                ratio = figures[name]["ratio_to_hand_written"]
                cpu_ratio = figures[name]["cpu_ratio_to_hand_written"]
                out.append(
                    {
                        "goal": f"{name} >= {GOALS[family]}x the hand-written pipeline ({workers} workers)",
                        "met": ratio >= GOALS[family],
                        "ratio": ratio,
                        "detail": f"{ratio}x ({figures[name]['samples_per_s_median']} vs "
                        f"{next(iter(figures.values()))['samples_per_s_median']} "
                        f"samples/s wall; {cpu_ratio}x in samples per CPU second)",
                    }
                )
            packed = "qwen2-vl + fast-qwen2-vl + FFD packing"
            if family == "qwen" and packed in figures and name in figures:
                ratio = round(
                    figures[packed]["samples_per_s_median"] / figures[name]["samples_per_s_median"], 3
                )
                cpu_ratio = round(
                    figures[packed]["samples_per_cpu_s_median"] / figures[name]["samples_per_cpu_s_median"], 3
                )
                out.append(
                    {
                        "goal": f"packing per-sample throughput >= {PACKING_GOAL}x no packing "
                        f"({workers} workers)",
                        "met": ratio >= PACKING_GOAL,
                        "ratio": ratio,
                        "detail": f"{ratio}x wall, {cpu_ratio}x per CPU second; first batch "
                        f"{figures[packed]['first_batch_s_median']} s packed vs "
                        f"{figures[name]['first_batch_s_median']} s unpacked",
                    }
                )
    return out


if __name__ == "__main__":
    main()
