"""Smoke test of the benchmark suite: every script runs with tiny sizes and writes its JSON.

No timing is asserted (figures depend on the machine); only that each benchmark ran, printed
its tables and wrote the keys the summary reads.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_run_all_quick_writes_every_benchmark(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--out", str(tmp_path),
         "--only", "overhead", "loader", "profile", "memory", "packing"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "latest.json").read_text())
    bench = data["benchmarks"]
    assert set(bench) == {"overhead", "loader", "profile", "memory", "packing"}
    overhead = bench["overhead"]["result"]
    for section in ("overhead", "msc_metrics"):
        assert {"cpu_samples_per_s", "ratio_cpu", "ratio_wall"} <= set(overhead[section])
    assert set(overhead["overhead"]["cpu_samples_per_s"]) == {"framework", "hand-wired"}
    assert all(v > 0 for v in overhead["overhead"]["cpu_samples_per_s"].values())
    stages = bench["profile"]["result"]["profile"]["stages"]
    assert any(k.startswith("encode_sample") for k in stages)
    top_level = [v["share"] for k, v in stages.items() if not k.startswith((" ", "MSC"))]
    assert 0 < sum(top_level) <= 1 + 0.00005 * len(top_level)  # each share rounded to 4 places
    assert "ratio_current_to_baseline" in bench["profile"]["result"]["before_after"] or \
        "skipped" in bench["profile"]["result"]["before_after"]
    memory = bench["memory"]["result"]
    assert memory["peak_rss_0_workers_mb"] >= memory["rss_after_build_mb"] > 0
    assert bench["packing"]["result"]["goals"]
    md = (tmp_path / "latest.md").read_text()
    assert md.startswith("# Benchmark results") and "| overhead |" in md
    assert "ratio framework / hand-wired" in proc.stdout


@pytest.mark.slow
def test_video_benchmark_quick_run_reports_the_ratio(tmp_path):
    """``run_all --only video``: the seek / decode-all figures reach the summary."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--out", str(tmp_path),
         "--only", "video"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    video = json.loads((tmp_path / "latest.json").read_text())["benchmarks"]["video"]["result"]
    assert {c["choice"] for c in video["cases"]} == {"8 frames", "32 frames", "1 fps", "2 fps"}
    for case in video["cases"]:
        assert case["kept_frames"] <= case["total_frames"]
        assert all(v > 0 for v in case["ms"].values())
    assert "decode-all / seek" in (tmp_path / "latest.md").read_text()
