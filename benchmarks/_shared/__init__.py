"""Private helpers of the benchmark scripts (not benchmarks themselves; ``run_all.py`` skips them).

A script in a group folder reaches them with ``sys.path.insert(0, str(Path(__file__).resolve()
.parents[1]))`` and ``from _shared.common import ...``, so it runs as
``python benchmarks/<group>/<name>.py`` from any working directory.
"""

from pathlib import Path

BENCHMARKS_DIR = Path(__file__).resolve().parents[1]
"""The ``benchmarks/`` folder."""
RESULTS_DIR = BENCHMARKS_DIR / "results"
"""Where ``run_all.py`` writes ``latest.json`` / ``latest.md`` and the scripts cache their data."""
CACHE_DIR = RESULTS_DIR / ".cache"
"""Data the benchmarks write once and reuse (realistic dataset, tokenizers, videos)."""
