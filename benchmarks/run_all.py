"""Run every benchmark in one go; write ``results/latest.json`` and ``results/latest.md``.

Run: ``python benchmarks/run_all.py [--quick] [--only NAME ...] [--out DIR]`` (``make bench``).

Each benchmark script runs as its own process (so one failing or one heavy import does not
disturb the others) and prints its own tables; this runner collects the JSON each writes, adds
the wall time of each script and the peak resident memory of the run (the largest
``ru_maxrss`` of any finished child process, loader workers included, and of this process),
prints a summary of the key figures with their goals, and writes both files. ``--quick``
passes tiny sizes to every script (a smoke test, not a measurement).
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import print_table

# name -> (script, full-run arguments, quick arguments, how the JSON comes back)
BENCHMARKS = {
    "pipelines": ("pipelines.py", [], ["--quick"], "file"),
    "image_processors": ("image_processors.py", [], ["--quick"], "file"),
    "loader": ("loader.py", [], ["--quick"], "file"),
    "memory": ("memory.py", [], ["--quick"], "file"),
    "cli_startup": ("cli_startup.py", ["--runs", "9"], ["--runs", "1"], "stdout"),
    "overhead": ("overhead.py", [], ["--quick"], "file"),
    "packing": (
        "packing.py",
        ["--samples", "10000", "--repeats", "5"],
        ["--samples", "1000", "--repeats", "1"],
        "file",
    ),
    "profile": ("profile_pipeline.py", ["--batches", "30", "--rounds", "6"], ["--quick"], "file"),
    "batch_formats": ("batch_formats.py", [], ["--quick"], "file"),
    "hf_processor": ("hf_processor.py", ["--samples", "96", "--repeats", "3"], ["--quick"], "file"),
    "convert": ("convert.py", ["--records", "20000"], ["--records", "200"], "file"),
    "video": ("video.py", ["--repeats", "3"], ["--quick"], "file"),
    "validation_heap": ("validation_heap.py", [], ["--quick"], "file"),
}
FALLBACKS: dict[str, tuple] = {}
"""Used when the primary script is missing or fails."""


def _run(script: str, args: list[str], mode: str, env: dict) -> dict:
    """Run one script; return its JSON (or an error), wall seconds and return code."""
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "result.json"
        cmd = [sys.executable, str(HERE / script), *args]
        cmd += ["--json"] if mode == "stdout" else ["--json", str(out_file)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE if mode == "stdout" else None)
        seconds = time.perf_counter() - start
        record: dict = {"script": script, "seconds": round(seconds, 1), "returncode": proc.returncode}
        try:
            if mode == "stdout":
                record["result"] = json.loads(proc.stdout)
                print(json.dumps(record["result"], indent=2))
            elif out_file.exists():
                record["result"] = json.loads(out_file.read_text())
        except ValueError as exc:
            record["error"] = f"unreadable JSON: {exc}"
        if proc.returncode != 0:
            record["error"] = f"exit status {proc.returncode}"
        elif "result" not in record:
            record.setdefault("error", "no JSON written")
        return record


def _get(mapping, *path, default=None):
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return default
        mapping = mapping[key]
    return mapping


def summary_rows(results: dict) -> list[list[str]]:
    """``[benchmark, figure, value, goal, met]`` rows of the key figures."""
    rows: list[list[str]] = []

    def add(bench, figure, value, goal="", met=None):
        rows.append([bench, figure, str(value), goal, "" if met is None else ("yes" if met else "NO")])

    ov = _get(results, "overhead", "result")
    if ov:
        o = ov["overhead"]
        for name, rate in o["cpu_samples_per_s"].items():
            add("overhead", f"{name} samples/s (CPU time, 0 workers)", rate)
        add(
            "overhead",
            "ratio framework / hand-wired (CPU, best rounds)",
            f"{o['ratio_cpu']:.3f} "
            f"(median of per-round ratios {o.get('ratio_cpu_paired_median', float('nan')):.3f}; "
            f"wall {o['ratio_wall']:.3f})",
            f">= {ov['goal_ratio']}",
            o["ratio_cpu"] >= ov["goal_ratio"],
        )
        own = ov.get("framework_own_time")
        if own:
            add("overhead", "framework-only layers' own time / loop time (cProfile)", f"{own['share']:.3%}")
        m = ov["msc_metrics"]
        add(
            "overhead",
            "MSC metrics skipped / default: whole pipeline (CPU, best rounds)",
            f"{m['ratio_cpu']:.3f} (median of per-round ratios "
            f"{m.get('ratio_cpu_paired_median', float('nan')):.3f})",
        )
        raw = ov.get("msc_metrics_raw_reads")
        if raw:
            add(
                "overhead",
                "MSC metrics skipped / default: read + decode only (CPU, best rounds)",
                f"{raw['ratio_cpu']:.3f} (median of per-round ratios "
                f"{raw.get('ratio_cpu_paired_median', float('nan')):.3f})",
            )
    pl = _get(results, "pipelines", "result")
    if pl:
        for family, by_workers in pl.get("families", {}).items():
            for workers, figures in by_workers.items():
                base = next(iter(figures))
                for name, f in figures.items():
                    add(
                        "pipelines",
                        f"{name}, {workers} workers: samples/s (x {base}; first batch)",
                        f"{f['samples_per_s_median']} ({f['ratio_to_hand_written']}x; "
                        f"{f['first_batch_s_median']} s)",
                    )
        for goal in pl.get("goals", []):
            add("pipelines", goal["goal"], goal["detail"], "", goal["met"])
        for family, check in pl.get("outputs", {}).items():
            add(
                "pipelines",
                f"{family}: same outputs as the hand-written pipeline (first batch)",
                f"ids identical {check['input_ids_identical']}, labels identical "
                f"{check['labels_identical']} (differ on tokens {check.get('labels_differ_on')}), "
                f"max pixel diff {check['pixel_values_max_abs_diff']}",
            )
    ip = _get(results, "image_processors", "result")
    if ip:
        for row in ip.get("rows", []):
            add(
                "image_processors",
                f"{row['family']} {row['long_side']} px: transformers (torchvision) / fast, ms per image",
                f"{row['hf_ms']} / {row['fast_ms']} ({row['ratio']}x; max diff "
                f"{row['max_abs_diff']}; from JPEG {row['from_jpeg_ratio']}x)",
            )
        for goal in ip.get("goals", []):
            add("image_processors", goal["goal"], goal["detail"], "", goal["met"])
    lo = _get(results, "loader", "result")
    if lo:
        for goal in lo.get("goals", []):
            add("loader", goal["goal"], goal["detail"], "<= 1.5x, exact", goal["met"])
    me = _get(results, "memory", "result")
    if me:
        for r in me.get("workers", []):
            what = "packing buffer 100" if r["packing"] else "no packing"
            add("memory", f"worker peak RSS, 2 workers, {what}", f"{r['worker_peak_rss_mb']} MiB")
        for r in me.get("rebuilt", []):
            add(
                "memory",
                f"RSS over rebuilt loaders ({r['kind']})",
                f"{r['rss_mb'][0]} -> {r['rss_mb'][-1]} MiB ({r['growth_per_loader_mb']} MiB per loader)",
            )
        for goal in me.get("goals", []):
            add("memory", goal["goal"], goal["detail"], "", goal["met"])
    pk = _get(results, "packing", "result")
    if pk:
        for goal in pk.get("goals", []):
            add("packing", goal["goal"], goal["detail"], "", goal["met"])
    cli = _get(results, "cli_startup", "result")
    if cli:
        regular = cli.get("regular_install") or cli
        add(
            "cli_startup",
            "`energon-plugins list` / `python -c pass`, regular install (wall; CPU time)",
            f"{regular['cli_median_s'] * 1000:.0f} / {regular['baseline_median_s'] * 1000:.0f} ms "
            f"({regular['ratio']}x; CPU {regular.get('cpu_ratio')}x)",
            f"<= {cli['goal_ratio']}",
            regular["ratio"] <= cli["goal_ratio"],
        )
        floor = (regular.get("breakdown_median_s") or {}).get("import pluggy (loads every plugin)")
        if floor:
            add(
                "cli_startup",
                "`import pluggy` alone / `python -c pass`, regular install",
                f"{floor / regular['baseline_median_s']:.2f}x (a floor of `list`)",
            )
        add(
            "cli_startup",
            "the same in the project's .venv (editable installs)",
            f"{cli['cli_median_s'] * 1000:.0f} / {cli['baseline_median_s'] * 1000:.0f} ms ({cli['ratio']}x)",
        )
        heavy = cli.get("heavy_modules_imported_by_list") or []
        add("cli_startup", "heavy modules imported by `list`", ", ".join(heavy) or "none", "none", not heavy)
    pr = _get(results, "profile", "result")
    if pr:
        for stage, v in _get(pr, "profile", "stages", default={}).items():
            add("profile", f"share: {stage.strip()}", f"{v['share']:.1%}")
        ba = pr.get("before_after") or {}
        if "ratio_current_to_baseline" in ba:
            rates = ba["cpu_samples_per_s"]
            add(
                "profile",
                f"cuts: current / {ba['baseline_revision'][:10]} samples/s (CPU)",
                f"{rates['current']} / {rates['baseline']} ({ba['ratio_current_to_baseline']:.3f}x)",
            )
        if "encode_sample_us" in ba:
            us = ba["encode_sample_us"]
            add(
                "profile",
                "cuts: encode_sample alone, µs per sample current / baseline",
                f"{us['current']} / {us['baseline']} ({ba['encode_sample_speedup']:.3f}x faster)",
            )
        if "tokenize_conversation_us" in ba:
            t, p = ba["tokenize_conversation_us"], ba["image_to_pil_336px_us"]
            add(
                "profile",
                "cuts: tokenize_conversation, µs current / baseline",
                f"{t['current']} / {t['baseline']} ({ba['tokenize_conversation_speedup']:.2f}x faster)",
            )
            add(
                "profile",
                "cuts: Energon tensor -> PIL (336 px), µs current / baseline",
                f"{p['current']} / {p['baseline']} ({ba['image_to_pil_speedup']:.2f}x faster)",
            )
    bf = _get(results, "batch_formats", "result")
    if bf:
        for goal in bf.get("goals", []):
            add("batch_formats", goal["goal"], goal["detail"], "", goal["met"])
    vh = _get(results, "validation_heap", "result")
    if vh:
        add(
            "validation_heap",
            f"validation pass at 0 workers beside ~{vh['objects_in_process']:,} objects: "
            "Energon (no freeze) / with the freeze rule, s",
            " / ".join(f"{v:.3f}" for v in vh["median_pass_seconds"].values()) + f" ({vh['speedup']}x)",
        )
    hf = _get(results, "hf_processor", "result")
    if hf:
        rates = hf["samples_per_second"]
        add(
            "hf_processor",
            f"samples/s, hf-processor / per-batch processor loop ({hf['family']}, 1 thread)",
            f"{rates['encoder']} / {rates['baseline']} ({hf['ratio_encoder_over_baseline']:.2f}x)",
        )
    cv = _get(results, "convert", "result")
    if cv:
        add(
            "convert",
            f"records/s at {cv['records']} LLaVA records: convert / hand-written script",
            f"{cv['convert_records_per_s']} / {cv['handwritten_records_per_s']} "
            f"({cv['ratio_records_per_s']}x; CPU s {cv['convert_cpu_seconds']} / "
            f"{cv['handwritten_cpu_seconds']})",
            "> 1",
            cv["ratio_records_per_s"] > 1,
        )
        add(
            "convert",
            "peak RSS MiB: convert (largest worker) / hand-written script",
            f"{cv['convert_peak_rss_mb']} ({cv['convert_worker_peak_rss_mb']}) / "
            f"{cv['handwritten_peak_rss_mb']}",
        )
        add(
            "convert",
            "peak RSS growth per 10k records, MiB: convert / hand-written",
            f"{cv['convert_rss_growth_mb_per_10k_records']} / "
            f"{cv['handwritten_rss_growth_mb_per_10k_records']}",
        )
    vi = _get(results, "video", "result")
    if vi:
        add(
            "video",
            f"decode-all / seek, same kept frames ({vi['height']}p, {len(vi['cases'])} cases, median)",
            f"{vi['median_ratio_1_thread']}x (CPU, one decoder thread each; "
            f"wall against PyAV's default threads {vi['median_ratio_wall']}x)",
        )
        for case in vi["cases"]:
            if case["choice"] in ("8 frames", "2 fps"):
                add(
                    "video",
                    f"{case['seconds']} s video, gop {case['gop']}, {case['choice']}: "
                    "seek / decode-all CPU ms",
                    f"{case['cpu_ms']['seek']} / {case['cpu_ms']['decode_all_1_thread']} "
                    f"({case['ratio_1_thread']}x)",
                )
    for name, record in results.items():
        if record.get("error"):
            add(name, "ERROR", record["error"], "", False)
    return rows


def markdown(rows: list[list[str]], header: dict) -> str:
    """The summary as a markdown table, with the run's context on top."""
    lines = [
        "# Benchmark results",
        "",
        f"Measured {header['measured_at']} on {header['platform']} ({header['cpus']} CPUs, "
        f"load average {header['load_average']}), Python {header['python']}, "
        f"{'quick (smoke) run' if header['quick'] else 'full run'}, {header['seconds']} s.",
        "",
        "| benchmark | figure | value | goal | met |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    lines.append("")
    lines.append(
        "Seconds per script: "
        + ", ".join(f"{name} {sec}" for name, sec in header["script_seconds"].items())
        + "."
    )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Run the benchmarks, print the summary, write the two files; exit 1 if a script failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument("--out", default=str(HERE / "results"), help="where latest.* are written")
    args = parser.parse_args(argv)

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "ignore"),
    }
    names = args.only or list(BENCHMARKS)
    started = time.perf_counter()
    results: dict[str, dict] = {}
    for name in names:
        script, full, quick, mode = BENCHMARKS[name]
        candidates = [(script, full, quick, mode)]
        if name in FALLBACKS:
            candidates.append(FALLBACKS[name])
        for script, full, quick, mode in candidates:
            if not (HERE / script).exists():
                continue
            print(f"\n=== {name}: {script} {' '.join(quick if args.quick else full)}", flush=True)
            record = _run(script, quick if args.quick else full, mode, env)
            results[name] = record
            if not record.get("error"):
                break
        else:
            if name not in results:
                results[name] = {"error": "script missing"}
    seconds = round(time.perf_counter() - started, 1)

    def peak(who):
        return round(resource.getrusage(who).ru_maxrss / 1024, 1)

    peak_memory = {
        "largest_child_peak_rss_mb": peak(resource.RUSAGE_CHILDREN),
        "runner_peak_rss_mb": peak(resource.RUSAGE_SELF),
    }
    header = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "quick": args.quick,
        "seconds": seconds,
        "script_seconds": {n: r.get("seconds") for n, r in results.items()},
    }
    rows = summary_rows(results)
    rows.append(
        [
            "run",
            "peak resident memory of any benchmark process (incl. loader workers)",
            f"{peak_memory['largest_child_peak_rss_mb']} MiB",
            "",
            None,
        ]
    )
    rows[-1][-1] = ""
    print()
    print_table(f"Summary ({seconds} s)", ["benchmark", "figure", "value", "goal", "met"], rows)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(
        json.dumps({**header, "peak_memory": peak_memory, "summary": rows, "benchmarks": results}, indent=2)
        + "\n"
    )
    (out / "latest.md").write_text(markdown(rows, header))
    print(f"wrote {out / 'latest.json'} and {out / 'latest.md'}")
    return 1 if any(r.get("error") for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
