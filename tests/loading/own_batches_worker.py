"""Two real ranks (gloo) evaluating batches of a user's own type, for
``tests/loading/test_validation_own_batches.py``.

Usage: ``python own_batches_worker.py INIT_FILE DATASET OUT_DIR``.
The launcher imports torch and Energon once, then forks one process per rank (each its own
``torch.distributed`` rank). Each rank builds the datamodule with Energon's own
``DefaultTaskEncoder`` (``VQASample`` batches: no ``loss_mask``, no ``labels``) and writes
``OUT_DIR/rank{RANK}.json``:

- ``equal``: micro batch 2, the val split shared out evenly (4 batches per rank). Megatron's
  evaluation: ``iter(val_dataloader())`` once, then ``next()`` ``len()`` times per evaluation,
  three evaluations, with an all-reduce per batch as Megatron's loss reduction does (ranks with
  different batch counts would hang there; the process group times out after a minute).
- ``unequal``: micro batch 1, 8 and 7 batches: every rank raises the same error at its first
  ``next()``, none waits for the other.
"""

import datetime
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.distributed as dist

from tests._ranks import fork_ranks

WORLD = 2
EVALUATIONS = 3


def evaluate(dm) -> dict:
    """Megatron's evaluation loop, three times; the batches' type and keys."""
    loader = dm.val_dataloader()
    n = len(loader)
    validation = iter(loader)
    runs = []
    for _ in range(EVALUATIONS):
        batches = []
        for _ in range(n):
            batch = next(validation)
            reduced = torch.ones(1)
            dist.all_reduce(reduced)  # every rank takes part in every batch's reduction
            batches.append(
                {"type": type(batch).__name__, "keys": list(batch.__key__), "reduced": float(reduced.item())}
            )
        runs.append(batches)
    return {"n": n, "runs": runs}


def run_rank(rank: int, init_file: str, dataset: str, out_dir: str) -> None:
    """Body of one rank."""
    from megatron.energon import DefaultTaskEncoder

    from energon_plugins import EnergonMultiModalDataModule

    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )

    def make(micro_batch_size: int):
        return EnergonMultiModalDataModule(
            dataset,
            None,
            task_encoder=DefaultTaskEncoder(),
            seq_length=64,
            micro_batch_size=micro_batch_size,
            num_workers=0,
        )

    result = {"rank": rank, "equal": evaluate(make(2))}
    unequal = make(1).val_dataloader()
    try:
        next(iter(unequal))
        result["unequal"] = None
    except Exception as exc:
        result["unequal"] = {"type": type(exc).__name__, "message": str(exc)}
    result["local_unequal"] = unequal.local_pass_length()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Import once, fork one process per rank, exit non-zero if any rank failed."""
    import megatron.energon  # noqa: F401 - imported once, before forking

    import energon_plugins.loading.datamodule  # noqa: F401

    init_file, dataset, out_dir = sys.argv[1:4]
    fork_ranks(run_rank, WORLD, (init_file, dataset, out_dir), timeout=240)


if __name__ == "__main__":
    main()
