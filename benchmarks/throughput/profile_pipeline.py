"""Where the default pipeline's time goes, and what the cuts in our code gained.

Run: ``python benchmarks/throughput/profile_pipeline.py [--batches 40] [--rounds 6] [--baseline REV]
[--json out.json] [--quick]``.

1. **Profile** (cProfile, 0 workers, torch threads 1): ``--batches`` batches of the demo
   pipeline (``multimodal`` encoder, ``hf`` CLIP processor, batch 8) with multi-storage-client's
   default metrics bookkeeping. Prints the share of the loop's time in each stage (measured as
   the cumulative time of the stage's entry function) and the top functions by own time.
   The profiler's clock is this process's CPU time, so time other jobs on a shared machine
   take from it is not charged to whatever function was running. cProfile's per-call cost
   inflates call-heavy Python code; the shares are indicative.
2. **Before/after** (same run, no profiler): the task encoder and image-processor wrapper of
   revision ``--baseline`` (default: the commit before the cuts) are loaded from git next to the
   current ones, and two hand-wired Energon loaders (same data, same worker config, same
   transformers processor and tokenizer) are read in interleaved rounds; throughput is samples
   per second of CPU time, best round of each (the median of per-round ratios is kept too).
   Then ``encode_sample`` alone (64 decoded samples held in memory, no reading) is timed for
   both encoders in interleaved rounds: the speed-up of our code without Energon's share.
   Skipped (with a note) when git or the revision is not available.
"""

import argparse
import cProfile
import importlib.util
import pstats
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json
from _shared.pipeline import load_average, prepare, quiet_loading, timed_batches

BENCHMARK = {
    "name": "profile",
    "full": ["--batches", "30", "--rounds", "6"],
    "quick": ["--quick"],
    "output": "file",
}

REPO = Path(__file__).resolve().parents[2]
BASELINE = "b5d3cdd7c58d4e9340543e0aab89c36fe7fbd415"
"""The commit before the cuts (batched tokenization, two chat renders, image->PIL copies)."""

#: stage -> (file suffix, function name) of the entry function whose cumulative time is the stage's.
STAGES = {
    "read samples from the tar shards (Energon, via MSC)": ("itar_reader.py", "__getitem__"),
    "  reads through MSC's metrics wrapper (the read included)": ("providers/base.py", "_emit_metrics"),
    "decode PNG + JSON, build the sample (Energon)": ("default_decoder_webdataset.py", "load_sample"),
    "encode_sample (ours)": ("task_encoders/multimodal.py", "encode_sample"),
    "  image processor (hf wrapper + transformers)": ("image_processors/hf.py", "__call__"),
    "    Energon tensor -> PIL": ("image_processors/hf.py", "energon_image_to_pil"),
    "  chat template + tokenizer": ("chat/conversation.py", "tokenize_conversation"),
    "batch + encode_batch": ("batch_dataset.py", "flush"),
}


def _msc_overhead(stats: pstats.Stats) -> float:
    """Own time of every multi-storage-client function (the read itself is a C builtin)."""
    return sum(tt for (file, _, _), (_, _, tt, _, _) in stats.stats.items() if "multistorageclient" in file)


def profile(config: dict, batches: int) -> dict:
    """cProfile ``batches`` batches; stage shares and the top functions by own time."""
    from energon_plugins import EnergonMultiModalDataModule

    with quiet_loading(1):
        dm = EnergonMultiModalDataModule.from_config(config)
        iterator = iter(dm.train_dataloader())
        timed_batches(iterator, 3)
        profiler = cProfile.Profile(time.process_time)  # CPU time, not wall time
        profiler.enable()
        samples, wall, _ = timed_batches(iterator, batches)
        profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt
    stages = {}
    listed = 0.0  # from unrounded times, so the shares add up to 1
    for label, (suffix, name) in STAGES.items():
        cum = sum(
            ct
            for (file, _, func), (_, _, _, ct, _) in stats.stats.items()
            if file.endswith(suffix) and func == name
        )
        stages[label] = {"seconds": round(cum, 4), "share": round(cum / total, 4)}
        if not label.startswith(" "):
            listed += cum
    stages["rest: Energon wrappers (shuffle, blend, map, loader), conversions"] = {
        "seconds": round(total - listed, 4),
        "share": round((total - listed) / total, 4),
    }
    msc_own = _msc_overhead(stats)
    stages["MSC bookkeeping (own time of multistorageclient code)"] = {
        "seconds": round(msc_own, 4),
        "share": round(msc_own / total, 4),
    }
    top = []
    for (file, line, func), (_, ncalls, tt, ct, _) in sorted(
        stats.stats.items(), key=lambda kv: kv[1][2], reverse=True
    )[:15]:
        short = file.split("site-packages/")[-1].split("/work/main/")[-1]
        top.append(
            {
                "function": f"{short}:{line}({func})",
                "calls": ncalls,
                "own_s": round(tt, 4),
                "own_share": round(tt / total, 4),
                "cum_s": round(ct, 4),
            }
        )
    return {
        "samples": samples,
        "profiled_seconds": round(total, 3),
        "samples_per_s_under_profiler": round(samples / wall, 1),
        "stages": stages,
        "top_functions": top,
    }


def _git_show(rev: str, path: str) -> str | None:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _module_from_source(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


_MOVED = {
    "host": ("hookspecs", "kinds", "registry", "manager", "api", "context", "_markers"),
    "encoding": ("task_encoders", "image_processors", "packing", "samples", "sample_config"),
    "loading": (
        "datamodule",
        "dataloader",
        "checkpoint",
        "transfer",
        "errors_policy",
        "dataset_check",
        "distributed",
        "storage",
    ),
}


def _current_paths(source: str) -> str:
    """``source`` with imports of modules that moved into a layer folder rewritten."""
    import re

    layer = {module: folder for folder, modules in _MOVED.items() for module in modules}
    pattern = re.compile(r"energon_plugins\.(%s)\b" % "|".join(layer))
    return pattern.sub(lambda m: f"energon_plugins.{layer[m.group(1)]}.{m.group(1)}", source)


def load_baseline(rev: str):
    """The baseline's ``(MultimodalTaskEncoder, HFImageProcessor)`` classes, or None."""
    conv = _git_show(rev, "energon_plugins/task_encoders/conversation.py")
    multi = _git_show(rev, "energon_plugins/task_encoders/multimodal.py")
    hf = _git_show(rev, "energon_plugins/image_processors/hf.py")
    if not (conv and multi and hf):
        return None
    # The baseline predates the host / encoding / loading folders: point its imports there.
    conv, multi, hf = (_current_paths(text) for text in (conv, multi, hf))
    _module_from_source("_baseline_conversation", conv)
    multi = multi.replace("energon_plugins.encoding.task_encoders.conversation", "_baseline_conversation")
    encoder_module = _module_from_source("_baseline_multimodal", multi)
    hf_module = _module_from_source("_baseline_hf", hf)
    return encoder_module.MultimodalTaskEncoder, hf_module.HFImageProcessor


def read_samples(path: str, count: int) -> list:
    """``count`` decoded Energon samples of the dataset (no task-encoder work), in order."""
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset

    class Capture(DefaultTaskEncoder):
        def batch(self, samples):
            return samples

    dataset = get_val_dataset(
        path,
        split_part="train",
        batch_size=1,
        worker_config=WorkerConfig.default_worker_config(0),
        task_encoder=Capture(),
    )
    samples = []
    for batch in get_loader(dataset):
        samples.extend(batch)
        if len(samples) >= count:
            break
    return samples[:count]


def encode_only(encoders: dict, samples: list, rounds: int) -> dict:
    """CPU seconds per sample of ``encode_sample`` alone for each encoder, interleaved rounds."""
    import time

    per_sample: dict[str, list[float]] = {k: [] for k in encoders}
    names = list(encoders)
    for r in range(rounds + 1):
        for name in names if r % 2 == 0 else names[::-1]:
            encode = encoders[name].encode_sample
            start = time.process_time()
            for sample in samples:
                encode(sample)
            if r:  # round 0 warms up
                per_sample[name].append((time.process_time() - start) / len(samples))
    return per_sample


def _best_us(fns: dict, repeats: int, rounds: int = 7) -> dict:
    """Best-of-``rounds`` µs per call of each ``name -> fn`` (interleaved)."""
    import time

    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / repeats * 1e6)
    return {name: round(v, 1) for name, v in best.items()}


def micro_before_after(tokenizer, sample_config) -> dict:
    """The two cut helpers alone, baseline vs current, on fixed inputs (best of 7 rounds).

    ``tokenize_conversation`` on a system/user/assistant chat with the demo tokenizer, and the
    Energon tensor -> PIL conversion of a 336 px image (a CLIP-L input size; the demo's 32 px
    images are too small for it to matter).
    """
    import _baseline_conversation as old_conv
    import _baseline_hf as old_hf
    import torch

    from energon_plugins.encoding.chat import conversation as new_conv
    from energon_plugins.encoding.image_processors import hf as new_hf

    messages = new_conv.build_messages(
        sample_config.conversation_template,
        [
            ("user", "<image>\nWhat color is the rectangle in the middle?"),
            ("assistant", "The rectangle is green."),
        ],
    )
    assert old_conv.tokenize_conversation(
        tokenizer, messages, sample_config
    ) == new_conv.tokenize_conversation(tokenizer, messages, sample_config)
    tok = _best_us(
        {
            "baseline": lambda: old_conv.tokenize_conversation(tokenizer, messages, sample_config),
            "current": lambda: new_conv.tokenize_conversation(tokenizer, messages, sample_config),
        },
        repeats=100,
    )
    image = torch.rand(3, 336, 336, generator=torch.Generator().manual_seed(0))
    pil = _best_us(
        {
            "baseline": lambda: old_hf.energon_image_to_pil(image),
            "current": lambda: new_hf.energon_image_to_pil(image),
        },
        repeats=20,
    )
    return {
        "tokenize_conversation_us": tok,
        "tokenize_conversation_speedup": round(tok["baseline"] / tok["current"], 3),
        "image_to_pil_336px_us": pil,
        "image_to_pil_speedup": round(pil["baseline"] / pil["current"], 3),
    }


def before_after(config: dict, rounds: int, batches: int, rev: str) -> dict:
    """Current vs baseline encoder + image wrapper, hand-wired loaders, interleaved rounds."""
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    from energon_plugins import EnergonMultiModalDataModule

    baseline = load_baseline(rev)
    if baseline is None:
        return {"skipped": f"revision {rev} not available from git"}
    base_encoder_cls, base_wrapper_cls = baseline
    with quiet_loading(1):
        dm = EnergonMultiModalDataModule.from_config(config)
        current = dm.task_encoder
        raw_processor = dm.image_processor.processor  # the transformers processor itself
        context = dm.build_context("train").replace(image_processor=base_wrapper_cls(raw_processor))
        old = base_encoder_cls(context, current.options)

        def loader(encoder):
            dataset = get_train_dataset(
                dm.path,
                split_part="train",
                batch_size=dm.micro_batch_size,
                shuffle_buffer_size=dm.shuffle_buffer_size,
                max_samples_per_sequence=None,
                task_encoder=encoder,
                worker_config=WorkerConfig.default_worker_config(0),
            )
            return iter(get_savable_loader(dataset))

        iterators = {"current": loader(current), "baseline": loader(old)}
        for it in iterators.values():
            timed_batches(it, 3)
        rates: dict[str, list[float]] = {k: [] for k in iterators}
        names = list(iterators)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                samples, _, cpu = timed_batches(iterators[name], batches)
                rates[name].append(samples / cpu)
        samples = read_samples(dm.path, 64)
        encode = encode_only({"current": current, "baseline": old}, samples, 2 * rounds)
        micro = micro_before_after(dm.tokenizer, dm.multimodal_sample_config)
    ratios = [c / b for c, b in zip(rates["current"], rates["baseline"], strict=True)]
    encode_ratios = [b / c for c, b in zip(encode["current"], encode["baseline"], strict=True)]
    best = {k: max(v) for k, v in rates.items()}
    best_encode = {k: min(v) for k, v in encode.items()}
    return {
        "baseline_revision": rev,
        "cpu_samples_per_s": {k: round(v, 1) for k, v in best.items()},
        "ratio_current_to_baseline": round(best["current"] / best["baseline"], 4),
        "ratio_paired_median": round(statistics.median(ratios), 4),
        "ratio_rounds": [round(x, 4) for x in ratios],
        "encode_sample_us": {k: round(v * 1e6, 1) for k, v in best_encode.items()},
        "encode_sample_speedup": round(best_encode["baseline"] / best_encode["current"], 4),
        "encode_sample_speedup_paired_median": round(statistics.median(encode_ratios), 4),
        **micro,
    }


def main(argv=None) -> dict:
    """Profile, compare, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="batches profiled / per round")
    parser.add_argument("--rounds", type=int, default=6, help="before/after rounds")
    parser.add_argument("--baseline", default=BASELINE, help="git revision before the cuts")
    parser.add_argument("--no-compare", action="store_true", help="profile only")
    parser.add_argument("--cache-dir")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.rounds = 3, 2
    if importlib.util.find_spec("energon_plugins") is None:  # pragma: no cover
        raise SystemExit("energon_plugins is not installed")
    config = prepare(args.cache_dir)
    result = {"load_average": load_average(), "profile": profile(config, args.batches)}
    p = result["profile"]
    print_table(
        f"Where the time goes: {p['samples']} samples, 0 workers, cProfile "
        f"({p['profiled_seconds']} s profiled)",
        ["stage (cumulative time)", "seconds", "share"],
        [[k, v["seconds"], f"{v['share']:.1%}"] for k, v in p["stages"].items()],
    )
    print_table(
        "Top functions by own time",
        ["function", "calls", "own s", "share"],
        [[t["function"][-90:], t["calls"], t["own_s"], f"{t['own_share']:.1%}"] for t in p["top_functions"]],
    )
    if not args.no_compare:
        cmp = before_after(config, args.rounds, args.batches, args.baseline)
        result["before_after"] = cmp
        if "skipped" in cmp:
            print(f"before/after: skipped ({cmp['skipped']})")
        else:
            rates = cmp["cpu_samples_per_s"]
            print_table(
                f"Cuts: current vs {args.baseline[:10]} (encoder + image wrapper), "
                f"{args.rounds} interleaved rounds",
                ["code", "samples/s (CPU)", "ratio"],
                [
                    ["baseline", rates["baseline"], ""],
                    ["current", rates["current"], f"{cmp['ratio_current_to_baseline']:.3f}"],
                ],
            )
            us = cmp["encode_sample_us"]
            print(
                f"encode_sample alone (64 decoded samples, CPU time): baseline {us['baseline']} µs, "
                f"current {us['current']} µs per sample: {cmp['encode_sample_speedup']:.3f}x faster"
            )
            t, p = cmp["tokenize_conversation_us"], cmp["image_to_pil_336px_us"]
            print(
                f"tokenize_conversation: {t['baseline']} -> {t['current']} µs "
                f"({cmp['tokenize_conversation_speedup']:.2f}x); Energon tensor -> PIL, 336 px: "
                f"{p['baseline']} -> {p['current']} µs ({cmp['image_to_pil_speedup']:.2f}x)"
            )
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'profile_pipeline', result)}")
    return result


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: each stage's share, the cuts against the baseline."""
    rows = [
        summary_row(f"share: {stage.strip()}", f"{v['share']:.1%}")
        for stage, v in result["profile"]["stages"].items()
    ]
    cuts = result.get("before_after") or {}
    if "ratio_current_to_baseline" in cuts:
        rates = cuts["cpu_samples_per_s"]
        rows.append(
            summary_row(
                f"cuts: current / {cuts['baseline_revision'][:10]} samples/s (CPU)",
                f"{rates['current']} / {rates['baseline']} ({cuts['ratio_current_to_baseline']:.3f}x)",
            )
        )
    if "encode_sample_us" in cuts:
        us = cuts["encode_sample_us"]
        rows.append(
            summary_row(
                "cuts: encode_sample alone, µs per sample current / baseline",
                f"{us['current']} / {us['baseline']} ({cuts['encode_sample_speedup']:.3f}x faster)",
            )
        )
    if "tokenize_conversation_us" in cuts:
        t, p = cuts["tokenize_conversation_us"], cuts["image_to_pil_336px_us"]
        rows.append(
            summary_row(
                "cuts: tokenize_conversation, µs current / baseline",
                f"{t['current']} / {t['baseline']} ({cuts['tokenize_conversation_speedup']:.2f}x faster)",
            )
        )
        rows.append(
            summary_row(
                "cuts: Energon tensor -> PIL (336 px), µs current / baseline",
                f"{p['current']} / {p['baseline']} ({cuts['image_to_pil_speedup']:.2f}x faster)",
            )
        )
    return rows


if __name__ == "__main__":
    main()
