"""Four real ranks (gloo) agreeing on the validation length, for
``tests/loading/test_stopped_rank.py`` (issue 27).

Usage: ``python stopped_rank_worker.py MODE INIT_FILE DATASET OUT_DIR``, MODE ``stopped``,
``killed`` or ``alive``. The launcher imports torch and Energon once, then forks one process per rank (each
its own ``torch.distributed`` rank, file rendezvous). The training process group gets a
five-minute timeout and the data side ``ENERGON_PLUGINS_DATA_TIMEOUT`` seconds
(:data:`DATA_TIMEOUT`), so a rank that fails quickly was failed by the data side. Each rank
writes ``OUT_DIR/rank{RANK}.json``.

- ``stopped``: every rank builds its validation loader (where the data side's gloo group is
  created), then rank :data:`STOPPED` stops itself with SIGSTOP; the others call
  ``len(val_dataloader())`` and record the error, its message, the ranks it names and how long
  it took. The launcher waits for them (at most the data timeout plus two minutes), then
  SIGKILLs the stopped rank and writes ``OUT_DIR/launcher.json``: every rank's exit code and
  whether the stopped rank was still there (stopped, not crashed) when the others were done.
- ``killed``: with the default data timeout, rank :data:`STOPPED` exits after a first
  agreement; the others' second agreement records the error and how long it took (a dead
  rank's closed connection names it at once).
- ``alive``: DP=2 x CP=2 (megatron-core groups), then DP=4 over the default group: each rank
  records its own pass length, ``len(val_dataloader())``, and the plain ``all_reduce(MAX)``
  over the data-parallel group that the length agreement used before.
"""

import datetime
import json
import os
import signal
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.distributed as dist

from tests._ranks import fork_ranks

WORLD = 4
STOPPED = 2
"""The rank that stops itself (neither the first nor the last: naming it is not rank 0's job)."""
DATA_TIMEOUT = 5.0
TRAINING_TIMEOUT = datetime.timedelta(minutes=5)


def datamodule(dataset: str, pg_collection=None):
    """A datamodule with Energon's own ``DefaultTaskEncoder`` (no tokenizer, quick to build):
    one sample per batch, so the DP ranks' parts differ by a batch."""
    from megatron.energon import DefaultTaskEncoder

    from energon_plugins import EnergonMultiModalDataModule

    return EnergonMultiModalDataModule(
        dataset,
        None,
        task_encoder=DefaultTaskEncoder(),
        seq_length=64,
        micro_batch_size=1,
        num_workers=0,
        pg_collection=pg_collection,
    )


def write(out_dir: str, name: str, result: dict) -> None:
    """Write ``result`` to ``OUT_DIR/NAME.json``."""
    with open(os.path.join(out_dir, f"{name}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)


def init(rank: int, init_file: str) -> None:
    """Join the (training) process group: gloo, file rendezvous, a long timeout."""
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD, timeout=TRAINING_TIMEOUT
    )


def run_stopped(rank: int, init_file: str, dataset: str, out_dir: str) -> None:
    """Body of one rank in ``stopped`` mode."""
    from energon_plugins import RankTimeoutError
    from energon_plugins.loading.distributed import build_pg_collection

    init(rank, init_file)
    loader = datamodule(dataset, build_pg_collection()).val_dataloader()
    if rank == STOPPED:
        os.kill(os.getpid(), signal.SIGSTOP)
    started = time.perf_counter()
    result: dict = {"rank": rank}
    try:
        result["length"] = len(loader)
    except RankTimeoutError as exc:
        result.update(error=type(exc).__name__, message=str(exc), ranks=list(exc.ranks))
    result["seconds"] = time.perf_counter() - started
    write(out_dir, f"rank{rank}", result)


def run_alive(rank: int, init_file: str, dataset: str, out_dir: str) -> None:
    """Body of one rank in ``alive`` mode."""
    from energon_plugins.loading.distributed import build_pg_collection

    init(rank, init_file)
    result: dict = {"rank": rank}
    for layout, collection in (("dp2cp2", build_pg_collection(cp=2)), ("dp4", None)):
        loader = datamodule(dataset, collection).val_dataloader()
        local = loader.local_pass_length()
        before = torch.tensor([local], dtype=torch.int64)
        dist.all_reduce(before, op=dist.ReduceOp.MAX, group=collection.dp if collection else None)
        result[layout] = {"local": local, "length": len(loader), "all_reduce": int(before.item())}
    write(out_dir, f"rank{rank}", result)
    dist.barrier()
    dist.destroy_process_group()


def run_killed(rank: int, init_file: str, dataset: str, out_dir: str) -> None:
    """Body of one rank in ``killed`` mode: rank :data:`STOPPED` dies after one agreement."""
    from energon_plugins import RankTimeoutError
    from energon_plugins.loading.distributed import DataGroup, parallel_layout

    init(rank, init_file)
    group = DataGroup(parallel_layout())
    result: dict = {"rank": rank, "first": group.max_of(rank, "first agreement")}
    dist.barrier()  # every rank has its first answer before rank STOPPED goes
    if rank == STOPPED:
        os._exit(3)
    started = time.perf_counter()
    try:
        result["second"] = group.max_of(rank, "second agreement")
    except RankTimeoutError as exc:
        result.update(error=type(exc).__name__, message=str(exc), ranks=list(exc.ranks))
    result["seconds"] = time.perf_counter() - started
    write(out_dir, f"rank{rank}", result)


def data_timeout() -> float:
    """The data timeout the ranks will use (``ENERGON_PLUGINS_DATA_TIMEOUT`` or the default)."""
    from energon_plugins.loading.distributed import data_timeout as configured

    return configured()


def launch(target, init_file: str, dataset: str, out_dir: str) -> None:
    """Fork the ranks; once all but rank :data:`STOPPED` are done, SIGKILL it if it is there."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(rank, init_file, dataset, out_dir)) for rank in range(WORLD)]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + data_timeout() + 120
    for rank, proc in enumerate(procs):
        if rank != STOPPED:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
    survivors_done = all(not proc.is_alive() for rank, proc in enumerate(procs) if rank != STOPPED)
    stopped_still_there = procs[STOPPED].is_alive()
    for proc in procs:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
    codes = [proc.exitcode for proc in procs]
    write(
        out_dir,
        "launcher",
        {"codes": codes, "survivors_done": survivors_done, "stopped_still_there": stopped_still_there},
    )
    print("OK")


def main() -> None:
    """Import once, then fork one process per rank."""
    import megatron.core.process_groups_config
    import megatron.energon  # noqa: F401 - imported once, before forking

    import energon_plugins.loading.datamodule  # noqa: F401

    mode, init_file, dataset, out_dir = sys.argv[1:5]
    if mode == "killed":  # the default data timeout: a dead rank is named long before it
        launch(run_killed, init_file, dataset, out_dir)
        return
    os.environ["ENERGON_PLUGINS_DATA_TIMEOUT"] = str(DATA_TIMEOUT)
    if mode == "stopped":
        launch(run_stopped, init_file, dataset, out_dir)
    else:
        fork_ranks(run_alive, WORLD, (init_file, dataset, out_dir), timeout=240)


if __name__ == "__main__":
    main()
