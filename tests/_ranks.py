"""Launching several real ``torch.distributed`` ranks (gloo) for the multi-process tests.

A test runs a worker script with :func:`run_worker`; the script imports what it needs once and
calls :func:`fork_ranks`, which forks one process per rank (each its own ``torch.distributed``
rank, rendezvous through a shared file) and exits non-zero if any rank failed.

:func:`dp_collection` stands in for one rank's ``pg_collection`` without a process group: a
loader needs only the data-parallel rank and size to be built, so tests can build every rank
of a layout in one process.
"""

import os
import pathlib
import subprocess
import sys
import types
from collections.abc import Callable, Sequence

REPO = pathlib.Path(__file__).resolve().parents[1]


class DPGroup:
    """A data-parallel group answering ``rank()`` and ``size()``."""

    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def dp_collection(rank: int, size: int) -> types.SimpleNamespace:
    """A ``pg_collection`` whose ``dp`` group is rank ``rank`` of ``size``."""
    return types.SimpleNamespace(dp=DPGroup(rank, size))


def fork_ranks(target: Callable[..., None], world: int, args: Sequence[object], timeout: float) -> None:
    """Run ``target(rank, *args)`` in ``world`` forked processes; exit 1 naming the failed ranks."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(rank, *args)) for rank in range(world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=timeout)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    codes = [proc.exitcode for proc in procs]
    if any(code != 0 for code in codes):
        print(f"rank exit codes: {codes}", file=sys.stderr)
        sys.exit(1)
    print("OK")


def run_worker(worker: pathlib.Path, *args: object, timeout: float) -> subprocess.CompletedProcess:
    """Run a worker script as its own process, with this repository importable as ``tests``."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, str(worker), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
