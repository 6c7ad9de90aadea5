"""The 3-process run driven by ``tests/loading/test_val_dataloaders.py``: DP=3 over gloo.

Usage: ``python val_dataloaders_worker.py WORLD INIT_FILE METADATASET OUT_DIR``. The launcher
imports once, then forks one process per rank. Each rank evaluates every source's loader of
``val_dataloaders()`` twice the way Megatron-Bridge does (``iter()`` once, ``next()``
``len()`` times per evaluation), all-reducing each batch's ``loss_mask`` sum over the DP group
per micro batch (ranks with different lengths would hang there; the group times out in two
minutes), and writes ``OUT_DIR/rank{RANK}.json``: per source, the length, the real keys of
each evaluation, every row's ``__sources__`` and the number of fillers.
"""

import datetime
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch.distributed as dist
import torch.utils.data._utils as data_utils

from tests._ranks import fork_ranks

data_utils.MP_STATUS_CHECK_INTERVAL = 0.1
EVALUATIONS = 2


def run_rank(rank, world, init_file, metadataset, out_dir) -> None:
    """Body of one rank."""
    import transformers

    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.loading.distributed import build_pg_collection
    from energon_plugins.loading.validation import is_padding_batch
    from energon_plugins.synthetic import build_demo_tokenizer

    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    pgs = build_pg_collection()
    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )
    dm = EnergonMultiModalDataModule(
        metadataset,
        build_demo_tokenizer(),
        processor,
        seq_length=256,
        micro_batch_size=1,  # uneven parts (e.g. 4, 3, 3 samples): fillers on the short ranks
        num_workers=0,
        pg_collection=pgs,
    )
    result = {"dp_size": dist.get_world_size(pgs.dp), "sources": {}}
    for source, loader in dm.val_dataloaders().items():
        n = len(loader)
        validation = iter(loader)
        runs, sources, fillers = [], set(), 0
        for _ in range(EVALUATIONS):
            keys = []
            for _ in range(n):
                batch = next(validation)
                loss = batch["loss_mask"].double().sum()
                dist.all_reduce(loss, group=pgs.dp)  # per micro batch, as Megatron reduces
                sources.update(batch["__sources__"])
                if not is_padding_batch(batch):
                    keys.extend(batch["__keys__"])
                else:
                    fillers += 1
            runs.append(keys)
        result["sources"][source] = {"n": n, "runs": runs, "sources": sorted(sources), "fillers": fillers}
    dm.close()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Import once, fork one process per rank, exit non-zero if any rank failed."""
    import megatron.core.process_groups_config
    import megatron.energon  # noqa: F401
    import transformers  # noqa: F401

    import energon_plugins.loading.datamodule  # noqa: F401

    world, init_file, metadataset, out_dir = sys.argv[1:5]
    fork_ranks(run_rank, int(world), (int(world), init_file, metadataset, out_dir), timeout=240)


if __name__ == "__main__":
    main()
