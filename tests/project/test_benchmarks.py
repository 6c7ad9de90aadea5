"""Smoke test of the benchmark suite: the main scripts run with tiny sizes and write their JSON.

No timing is asserted (figures depend on the machine); only that each benchmark ran, printed
its tables and wrote the keys the summary reads. The realistic dataset the scripts share is
written once into ``benchmarks/results/.cache`` (48 samples in quick mode).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_run_all_quick_writes_every_benchmark(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    only = ["pipelines", "loader", "memory", "packing", "batch_formats"]
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run_all.py"),
            "--quick",
            "--out",
            str(tmp_path),
            "--only",
            *only,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "latest.json").read_text())
    bench = data["benchmarks"]
    assert set(bench) == set(only)
    # each script's own summary rows, concatenated; no ERROR row
    assert {row[0] for row in data["summary"]} == {*only, "run"}
    assert all(row[1] != "ERROR" for row in data["summary"])
    pipelines = bench["pipelines"]["result"]
    for family in ("llava", "qwen"):
        figures = pipelines["families"][family]["0"]
        assert all(f["samples_per_s_median"] > 0 and f["first_batch_s_median"] > 0 for f in figures.values())
        assert next(iter(figures)).startswith("hand-written")
        # the baseline and the project produce the same batch
        assert pipelines["outputs"][family]["input_ids_identical"] is True
    assert {g["goal"].split(" >=")[0] for g in pipelines["goals"]} >= {
        "llava + fast-clip",
        "qwen2-vl + fast-qwen2-vl",
        "packing per-sample throughput",
    }
    restore = bench["loader"]["result"]["restore"]
    assert {r["packing"] for r in restore} == {False, True}
    assert all(r["restored_batch_is_the_next_one"] for r in restore)
    memory = bench["memory"]["result"]
    assert memory["workers"][0]["packing"] and len(memory["workers"][0]["worker_peak_rss_mb"]) == 2
    assert len(memory["rebuilt"][0]["rss_mb"]) == 2
    assert bench["packing"]["result"]["goals"]
    formats = bench["batch_formats"]["result"]
    for pipeline in ("unpacked", "packed"):
        assert set(formats[pipeline]["formats"]) == {"megatron-bridge", "megatron-lm", "hf"}
        assert all(f["ratio_cpu"] > 0 for f in formats[pipeline]["formats"].values())
    assert len(formats["goals"]) == 6
    md = (tmp_path / "latest.md").read_text()
    assert md.startswith("# Benchmark results") and "| pipelines |" in md


@pytest.mark.slow
def test_convert_benchmark_compares_both_sides(tmp_path):
    """benchmarks/convert/convert.py runs both sides on generated LLaVA JSON and checks they agree."""
    out = tmp_path / "convert.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "convert" / "convert.py"),
            "--records",
            "120",
            "--json",
            str(out),
        ],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["records"] == 120 and data["ratio_records_per_s"] > 0
    assert set(data["runs"]) == {"hand-written@30", "convert@30", "hand-written@120", "convert@120"}
    assert data["runs"]["convert@120"]["written"] == data["runs"]["hand-written@120"]["written"] == 119


@pytest.mark.slow
def test_video_benchmark_quick_run_reports_the_ratio(tmp_path):
    """``run_all --only video``: the seek / decode-all figures reach the summary."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "run_all.py"),
            "--quick",
            "--out",
            str(tmp_path),
            "--only",
            "video",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    video = json.loads((tmp_path / "latest.json").read_text())["benchmarks"]["video"]["result"]
    assert {c["choice"] for c in video["cases"]} == {"8 frames", "32 frames", "1 fps", "2 fps"}
    for case in video["cases"]:
        assert case["kept_frames"] <= case["total_frames"]
        assert all(v > 0 for v in case["ms"].values())
    assert "decode-all / seek" in (tmp_path / "latest.md").read_text()


def test_cli_startup_times_a_regular_install_listing_the_same_plugins():
    """benchmarks/startup/cli_startup.py also times ``list`` in a throwaway environment without the
    editable-install finders; that environment lists the same plugins, imports nothing heavy."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "startup" / "cli_startup.py"), "--runs", "1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    regular = result["regular_install"]
    assert regular["same_rows_listed"] is True
    assert regular["baseline_command"] != result["baseline_command"]
    assert regular["cli_median_s"] > 0 and regular["ratio"] > 0
    assert result["goal_met"] == (regular["ratio"] <= result["goal_ratio"])
    assert result["heavy_modules_imported_by_list"] == []
    figures = {row[0]: row for row in result["summary"]}
    assert figures["heavy modules imported by `list`"][1:] == ["none", "none", True]
    goal = figures["`energon-plugins list` / `python -c pass`, regular install (wall; CPU time)"]
    assert goal[2:] == ["<= 3.0", result["goal_met"]]


def _quick_json(script: str, tmp_path: Path) -> dict:
    """Run ``benchmarks/SCRIPT --quick --json FILE`` offline; return the JSON it wrote (its
    ``summary`` rows checked: ``[figure, value, goal, met]``)."""
    out = tmp_path / f"{Path(script).stem}.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["summary"] and all(len(row) == 4 and isinstance(row[1], str) for row in result["summary"])
    return result


@pytest.mark.slow
def test_hf_processor_benchmark_times_the_same_pixels_on_both_sides(tmp_path):
    """benchmarks/processors/hf_processor.py gives the per-batch loop the encoder's processor settings and
    stops unless both paths make the same pixel values (a baseline left at the processor's
    default image size once timed a twentieth of the work)."""
    import importlib.util
    from types import SimpleNamespace

    import torch

    result = _quick_json("processors/hf_processor.py", tmp_path)
    assert set(result["samples_per_second"]) == {"encoder", "baseline"}
    assert all(rate > 0 for rate in result["samples_per_second"].values())

    spec = importlib.util.spec_from_file_location(
        "hf_processor_bench", ROOT / "benchmarks" / "processors" / "hf_processor.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ours = SimpleNamespace(pixel_values=torch.ones(8, 1176))
    module.same_pixels(ours, {"pixel_values": torch.ones(8, 1176)})
    with pytest.raises(SystemExit, match="different pixel values"):
        module.same_pixels(ours, {"pixel_values": torch.ones(2, 1176)})


def test_validation_heap_benchmark_times_both_loaders(tmp_path):
    """benchmarks/memory/validation_heap.py times validation passes with and without the freeze rule
    (quick sizes) and writes the keys the summary reads."""
    result = _quick_json("memory/validation_heap.py", tmp_path)
    assert result["batches_per_pass"] > 0 and result["objects_in_process"] > 10_000
    assert set(result["median_pass_seconds"]) == {"Energon (no freeze)", "with the freeze rule"}
    assert result["speedup"] > 0
