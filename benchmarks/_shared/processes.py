"""Commands run as fresh processes and timed (wall and CPU): the start-up benchmarks' helpers."""

import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def cli_command() -> list[str]:
    """The ``energon-plugins`` command of this environment (its console script, else ``python -m``)."""
    script = Path(sys.executable).with_name("energon-plugins")
    if script.exists():
        return [str(script)]
    found = shutil.which("energon-plugins")
    return [found] if found else [sys.executable, "-m", "energon_plugins"]


CPU_SECONDS: dict[str, list[float]] = {}
"""CPU seconds (user + system) of each command's child process, by command line."""


def timed_run(cmd: list[str], env: dict[str, str]) -> float:
    """Wall time of one run of ``cmd``; its CPU time is recorded in :data:`CPU_SECONDS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU_SECONDS.setdefault(" ".join(cmd), []).append(cpu)
    return wall
