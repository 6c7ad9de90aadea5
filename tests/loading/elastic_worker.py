"""The real multi-process runs of ``tests/loading/test_elastic_resume.py`` (issue 28).

Usage: ``python elastic_worker.py SPEC_JSON``. The spec names the dataset, a work folder, the
old and the new layout (ranks x loader workers, extra datamodule arguments), the datamodule
arguments both share, how many outputs each data partition reads before the change
(``before``) and at least how many after it (``after``; a partition reads at least the rest of
its epoch too, so that the epoch in progress is read whole). The launcher imports torch,
Energon and transformers once, then runs two phases one after the other, each in freshly
forked processes with its own gloo group (file rendezvous):

- ``old``: each rank of the old layout reads ``before`` outputs per partition and writes its
  state with ``save_checkpoint(WORK/ckpt)``; then it goes on reading what the new layout will
  read after the change (the uninterrupted run, the reference); the process group ends;
- ``new``: each rank of the new layout reads every old rank's file (``load_state_file``,
  index = old rank), restores the list with ``train_dataloader().restore_state(states)`` and
  reads as many outputs for each of its partitions.

Each rank writes ``WORK/PHASE/rank{RANK}.json``: its layout, the batches it read (rows of
sample keys) per data partition (``partitions``; for ``old`` also ``reference``, every batch
up to the end of the window), each partition's epoch length in batches as Energon counts it
(``old``; an upper bound with packing) and the ``positions`` its final ``save_state()``
records (partitioned loaders).

Batches are filed under partitions as the loader takes them: batch ``j`` of a rank comes from
its loader worker ``j % W`` (Energon's in-order round robin), and a worker takes its
partitions (``p % (ranks x W) == worker``) in turn, ascending. The saved ``positions`` check
this.
"""

import datetime
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch.distributed as dist
import torch.utils.data._utils as data_utils

from tests._ranks import fork_ranks

data_utils.MP_STATUS_CHECK_INTERVAL = 0.1

PHASE_TIMEOUT = 240
"""Seconds one phase's ranks may take (the process group times out after two minutes)."""


def datamodule(spec: dict, layout: dict, pg_collection):
    """The datamodule of one rank of ``layout`` (``{"ranks", "workers", "extra"}``)."""
    import transformers

    from energon_plugins import EnergonMultiModalDataModule
    from energon_plugins.synthetic import build_demo_tokenizer

    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )
    arguments = {
        "seq_length": 300,
        "micro_batch_size": 2,
        "num_workers": layout["workers"],
        "shuffle_buffer_size": 10,
        "pg_collection": pg_collection,
        "checkpoint_every_sec": 60,  # Energon's default: restores replay from older checkpoints
        "checkpoint_every_min_n_samples": None,
        **spec["options"],
        **layout["extra"],
    }
    return EnergonMultiModalDataModule(spec["dataset"], build_demo_tokenizer(), processor, **arguments)


def worker_partitions(layout) -> list[list[int]]:
    """The partitions each loader worker of this rank takes in turn (a rank without worker
    processes counts as one worker)."""
    from energon_plugins.loading.partitions import owned_partitions

    workers = max(layout.num_workers, 1)
    if not layout.partitioned:  # worker w of rank r is partition r x W + w
        return [[layout.dp_rank * workers + worker] for worker in range(workers)]
    return [
        owned_partitions(layout.partitions, layout.dp_size, layout.num_workers, layout.dp_rank, worker)
        for worker in range(workers)
    ]


def rows(batch) -> list[str]:
    """The rows of a megatron-bridge batch as their sample keys (a packed row joins its keys
    with commas)."""
    return [str(row) for row in batch["__keys__"]]


class PartitionReader:
    """Reads a rank's loader and files every batch (as rows) under its data partition."""

    def __init__(self, loader) -> None:
        self.loader = loader
        self.per_worker = worker_partitions(loader.layout)
        self.batches: dict[int, list[list[str]]] = {p: [] for ps in self.per_worker for p in ps}
        self.count = 0

    def until(self, targets: dict[int, int]) -> dict[int, list[list[str]]]:
        """Read until every partition has ``targets[p]`` batches (since the start); a copy of
        every partition's batches."""
        while any(len(self.batches[p]) < target for p, target in targets.items()):
            partitions = self.per_worker[self.count % len(self.per_worker)]
            turn = self.count // len(self.per_worker)
            self.batches[partitions[turn % len(partitions)]].append(rows(next(self.loader)))
            self.count += 1
        return {p: list(batches) for p, batches in self.batches.items()}


def epoch_lengths(loader) -> dict[int, int]:
    """Each partition's epoch in batches, as Energon's ``len_worker`` counts it (with packing,
    an upper bound: the batches of unpacked samples)."""
    dataset = loader.dataloader.dataset
    if not loader.layout.partitioned:  # one partition per worker
        return {
            p: int(dataset.len_worker(worker))
            for worker, ps in enumerate(worker_partitions(loader.layout))
            for p in ps
        }
    while not hasattr(dataset, "streams"):  # down Energon's wrappers to the interleaver
        dataset = dataset.dataset
    return {p: int(stream.chain.len_worker()) for p, stream in dataset.streams.items()}


def after_change(spec: dict, epochs: dict[int, int], partition: int) -> int:
    """Outputs ``partition`` reads after the change: ``spec["after"]``, and at least the rest
    of its epoch."""
    return max(int(spec["after"]), epochs[partition] - spec["before"])


def old_states(spec: dict) -> list:
    """Every old rank's state file, read with the restricted unpickler (index = old rank)."""
    from energon_plugins.loading.checkpoint import state_path
    from energon_plugins.loading.safe_load import load_state_file

    folder = os.path.join(spec["work"], "ckpt")
    return [load_state_file(state_path(folder, rank)) for rank in range(spec["old"]["ranks"])]


def old_epochs(spec: dict) -> dict[int, int]:
    """Every partition's epoch length, as the old ranks recorded it."""
    epochs: dict[int, int] = {}
    for rank in range(spec["old"]["ranks"]):
        with open(os.path.join(spec["work"], "old", f"rank{rank}.json"), encoding="utf-8") as fh:
            epochs.update({int(p): n for p, n in json.load(fh)["epoch"].items()})
    return epochs


def run_rank(rank: int, phase: str, spec: dict) -> None:
    """Body of one rank of ``phase`` (``old`` or ``new``)."""
    from energon_plugins.loading.distributed import build_pg_collection

    started = time.perf_counter()
    layout_spec = spec[phase]
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.path.join(spec['work'], f'rendezvous-{phase}')}",
        rank=rank,
        world_size=layout_spec["ranks"],
        timeout=datetime.timedelta(seconds=120),
    )
    dm = datamodule(spec, layout_spec, build_pg_collection())
    loader = dm.train_dataloader()
    result: dict = {"rank": rank, "phase": phase}
    if phase == "old":
        epochs = result["epoch"] = epoch_lengths(loader)
    else:
        epochs = old_epochs(spec)
        loader.restore_state(old_states(spec))
    reader = PartitionReader(loader)
    owned = list(reader.batches)
    after = {p: after_change(spec, epochs, p) for p in owned}
    if phase == "old":
        result["partitions"] = reader.until(dict.fromkeys(owned, spec["before"]))
        dm.save_checkpoint(os.path.join(spec["work"], "ckpt"))
        # the uninterrupted run goes on past the save: the reference for the new layout
        result["reference"] = reader.until({p: spec["before"] + n for p, n in after.items()})
    else:
        result["partitions"] = reader.until(after)
    state = loader.save_state()
    result["layout"] = {**loader.layout.as_dict(), "partitioned": loader.layout.partitioned}
    result["positions"] = {str(p): int(i) for p, i in state.get("positions", {}).items()}
    loader.close()
    result["seconds"] = round(time.perf_counter() - started, 2)
    folder = os.path.join(spec["work"], phase)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Import once; run the old layout, then the new one, each in freshly forked ranks."""
    import megatron.core.process_groups_config
    import megatron.energon  # noqa: F401
    from transformers import CLIPImageProcessor  # noqa: F401  (a lazy import every rank would pay)

    import energon_plugins.loading.datamodule
    import energon_plugins.loading.distributed
    import energon_plugins.synthetic  # noqa: F401

    with open(sys.argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    for phase in ("old", "new"):
        fork_ranks(run_rank, spec[phase]["ranks"], (phase, spec), timeout=PHASE_TIMEOUT)


if __name__ == "__main__":
    main()
