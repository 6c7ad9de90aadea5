"""One rank of the 4-process DP=2 x CP=2 run driven by ``tests/test_distributed.py``.

Usage: ``python distributed_worker.py RANK WORLD INIT_FILE DATASET SMALL_DATASET OUT_DIR``.
Writes ``OUT_DIR/rank{RANK}.json`` with what this rank read.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.utils.data._utils as data_utils  # noqa: E402

data_utils.MP_STATUS_CHECK_INTERVAL = 0.1

BATCHES_BEFORE_SAVE = 3
BATCHES_AFTER_SAVE = 3


def describe(batch):
    """Keys and a checksum of every tensor, to compare batches across processes."""
    return {
        "keys": list(batch.__key__),
        "input_ids": int(batch.input_ids.sum()),
        "pixels": round(float(batch.pixel_values.double().sum()), 3),
    }


def main() -> None:
    rank, world, init_file, dataset, small_dataset, out_dir = sys.argv[1:7]
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)

    import transformers

    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.checkpoint import load_datamodule_state, save_datamodule_state
    from energon_plugins.demo.tokenizer import build_demo_tokenizer
    from energon_plugins.distributed import build_pg_collection

    pgs = build_pg_collection(cp=2)
    tokenizer = build_demo_tokenizer()
    cls = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    processor = cls()

    def make(path, **kwargs):
        args = dict(seq_length=300, micro_batch_size=2, num_workers=0, shuffle_buffer_size=20,
                    pg_collection=pgs)
        args.update(kwargs)
        return EnergonMultiModalDataModule(path, tokenizer, processor, **args)

    result = {
        "rank": rank,
        "dp_rank": dist.get_rank(pgs.dp),
        "dp_size": dist.get_world_size(pgs.dp),
        "cp_rank": dist.get_rank(pgs.cp),
    }
    dm = make(dataset)
    result["val"] = [describe(b) for b in dm.val_dataloader()]
    result["val_again"] = [describe(b) for b in dm.val_dataloader()]

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

    small = make(small_dataset, num_val_workers=2)
    result["small_val"] = [describe(b)["keys"] for b in small.val_dataloader()]

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()
    print("OK")


if __name__ == "__main__":
    main()
