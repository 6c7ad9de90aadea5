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
         "--only", "overhead", "loader", "profile", "memory", "packing", "batch_formats"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "latest.json").read_text())
    bench = data["benchmarks"]
    assert set(bench) == {"overhead", "loader", "profile", "memory", "packing", "batch_formats"}
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
    formats = bench["batch_formats"]["result"]
    for pipeline in ("unpacked", "packed"):
        assert set(formats[pipeline]["formats"]) == {"megatron-bridge", "megatron-lm", "hf"}
        assert all(f["ratio_cpu"] > 0 for f in formats[pipeline]["formats"].values())
    assert len(formats["goals"]) == 6
    md = (tmp_path / "latest.md").read_text()
    assert md.startswith("# Benchmark results") and "| overhead |" in md
    assert "ratio framework / hand-wired" in proc.stdout


@pytest.mark.slow
def test_convert_benchmark_compares_both_sides(tmp_path):
    """benchmarks/convert.py runs both sides on generated LLaVA JSON and checks they agree."""
    out = tmp_path / "convert.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "convert.py"), "--records", "120", "--json", str(out)],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["records"] == 120 and data["ratio_records_per_s"] > 0
    assert set(data["runs"]) == {"hand-written@30", "convert@30", "hand-written@120", "convert@120"}
    assert data["runs"]["convert@120"]["written"] == data["runs"]["hand-written@120"]["written"] == 119
