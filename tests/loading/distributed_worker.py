"""The 4-process run driven by ``tests/loading/test_distributed.py``: DP=2 x CP=2, then DP=4.

Usage: ``python distributed_worker.py WORLD INIT_FILE DATASET SMALL_DATASET OUT_DIR``.
The launcher imports torch, megatron-core, Energon and transformers once, then forks one
process per rank (each its own ``torch.distributed`` rank over gloo), so the ranks do not
each pay the imports. Each rank writes ``OUT_DIR/rank{RANK}.json`` with what it read.

The evaluation protocol is Megatron's: ``iter(val_dataloader())`` once, then ``next()``
``len(val_dataloader())`` times per evaluation, three evaluations, with the loss of every
batch (the sum of its ``loss_mask``) all-reduced over the data-parallel group, as Megatron's
loss reduction does. Ranks with different batch counts would hang there (the process group
has a two-minute timeout, so a hang fails the run).
"""

import datetime
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.distributed as dist
import torch.utils.data._utils as data_utils

from tests._ranks import fork_ranks

data_utils.MP_STATUS_CHECK_INTERVAL = 0.1

BATCHES_BEFORE_SAVE = 3
BATCHES_AFTER_SAVE = 3


def describe(batch):
    """Keys and checksums of the (default megatron-bridge) batch, to compare across processes."""
    return {
        "keys": list(batch["__keys__"]),
        "input_ids": int(batch["tokens"].sum()),
        "pixels": round(float(batch["visual_inputs"].pixel_values.double().sum()), 3),
    }


EVALUATIONS = 3


def evaluate(dm, dp_group):
    """Megatron's evaluation loop over the datamodule's validation loader, three times (the
    default megatron-bridge batches: ``loss_mask`` weighs the loss, ``__keys__`` name the rows)."""
    from energon_plugins.loading.validation import is_padding_batch

    loader = dm.val_dataloader()
    n = len(loader)
    validation = iter(loader)
    runs = []
    for _ in range(EVALUATIONS):
        keys, local, reduced = [], 0.0, 0.0
        for _ in range(n):
            batch = next(validation)
            loss = batch.loss_mask.double().sum()
            total = loss.clone()
            dist.all_reduce(total, group=dp_group)  # per micro batch, as Megatron reduces
            local += float(loss)
            reduced += float(total)
            if not is_padding_batch(batch):
                keys.append(list(batch["__keys__"]))
            else:
                assert float(loss) == 0.0 and bool((batch.labels == -100).all())
        summed = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(summed, group=dp_group)  # the evaluation's loss sum over DP ranks
        runs.append({"keys": keys, "loss": local, "reduced": reduced, "reduced_sum": float(summed.item())})
    return {"n": n, "runs": runs}


def run_rank(rank, world, init_file, dataset, small_dataset, out_dir) -> None:
    """Body of one rank."""
    import time

    import transformers

    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.loading.checkpoint import load_datamodule_state, save_datamodule_state
    from energon_plugins.loading.distributed import build_pg_collection
    from energon_plugins.synthetic import build_demo_tokenizer

    started = time.perf_counter()
    marks = {}
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    marks["init"] = time.perf_counter() - started
    pgs = build_pg_collection(cp=2)
    dp4 = build_pg_collection(cp=1)
    tokenizer = build_demo_tokenizer()
    processor = transformers.CLIPImageProcessor()

    def make(path, **kwargs):
        args = dict(
            seq_length=300, micro_batch_size=2, num_workers=0, shuffle_buffer_size=20, pg_collection=pgs
        )
        args.update(kwargs)
        return EnergonMultiModalDataModule(path, tokenizer, processor, **args)

    result = {
        "rank": rank,
        "dp_rank": dist.get_rank(pgs.dp),
        "dp_size": dist.get_world_size(pgs.dp),
        "cp_rank": dist.get_rank(pgs.cp),
    }
    dm = make(dataset)
    marks["setup"] = time.perf_counter() - started
    result["val"] = [describe(b) for b in dm.val_dataloader().one_pass()]
    result["val_again"] = [describe(b) for b in dm.val_dataloader().one_pass()]

    train = dm.train_dataloader()
    result["train_before"] = [describe(next(train)) for _ in range(BATCHES_BEFORE_SAVE)]
    ckpt = os.path.join(out_dir, "ckpt")
    save_datamodule_state(dm, ckpt)
    result["train_after"] = [describe(next(train)) for _ in range(BATCHES_AFTER_SAVE)]
    dist.barrier()

    fresh = make(dataset)
    load_datamodule_state(fresh, ckpt)
    resumed = fresh.train_dataloader()
    result["train_resumed"] = [describe(next(resumed)) for _ in range(BATCHES_AFTER_SAVE)]

    marks["train"] = time.perf_counter() - started
    small = make(small_dataset, num_val_workers=2)
    result["small_val"] = [describe(b)["keys"] for b in small.val_dataloader().one_pass()]
    marks["small"] = time.perf_counter() - started

    result["eval"] = {}
    for layout, groups in (("dp2cp2", pgs), ("dp4", dp4)):
        for label, path in (("big", dataset), ("small", small_dataset)):
            dm = make(path, pg_collection=groups, num_val_workers=0)
            result["eval"][f"{layout}-{label}"] = evaluate(dm, groups.dp)
            dm.close()
    result["dp4_rank"] = dp4.dp.rank()

    marks["total"] = time.perf_counter() - started
    result["seconds"] = {k: round(v, 2) for k, v in marks.items()}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Import once, fork one process per rank, exit non-zero if any rank failed."""
    import megatron.core.parallel_state
    import megatron.core.process_groups_config
    import megatron.energon  # noqa: F401
    import transformers  # noqa: F401

    import energon_plugins.loading.datamodule  # noqa: F401

    world, init_file, dataset, small_dataset, out_dir = sys.argv[1:6]
    fork_ranks(run_rank, int(world), (int(world), init_file, dataset, small_dataset, out_dir), timeout=300)


if __name__ == "__main__":
    main()
