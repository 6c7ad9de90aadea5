"""``benchmarks/startup/cli_verbs.py``: the verb timings the README quotes are measured.

No timing is asserted beyond what holds on any machine (figures depend on it): every verb ran,
the status of ``demo`` reaches the terminal before its result reaches stdout, and each verb has
its row in the JSON's ``summary``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cli_startup_verbs_times_every_verb_and_the_demos_first_output():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "startup" / "cli_verbs.py"),
            "--runs",
            "1",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    verbs = result["verbs"]
    assert set(verbs["median_s"]) == {
        "energon-plugins --help",
        "energon-plugins list",
        "energon-plugins validate --quick CONFIG",
        "energon-plugins validate CONFIG",
    }
    assert all(seconds > 0 for seconds in verbs["median_s"].values())
    demo = verbs["demo_median_s"]
    # the start-up status shows before the result: the demo's loading happens in between
    assert 0 < demo["first_terminal_s"] < demo["first_stdout_s"] <= demo["total_s"]
    assert verbs["machine"]["cpus"] >= 1
    figures = [row[0] for row in result["summary"]]
    assert len(figures) == len(verbs["median_s"]) + 1
    assert all(f"`{verb}`" in figure for verb, figure in zip(verbs["median_s"], figures))
    assert figures[-1].startswith("`energon-plugins demo`: first output on a terminal")
