"""Data-parallel runs simulated in one process, for the checkpoint-folder tests.

Each DP rank is a datamodule with its own rank in a ``pg_collection`` (no process group is
needed to build a loader), as in ``test_elastic_restore.py``. :func:`save_run` writes every
rank's file with ``save_checkpoint``; :func:`read_run` restores each rank of another layout
(by a callable) and returns the keys each rank reads next.
"""

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from tests._ranks import dp_collection

BATCHES_BEFORE = 2
"""Batches each old rank reads before its state is saved."""
BATCHES_AFTER = 3
"""Batches each new rank reads after the restore."""
ITERATION = 100
"""The Megatron-Bridge iteration the fake Bridge checkpoints are of."""


def builder(dataset: Any, tokenizer: Any) -> Callable[..., Any]:
    """``make(rank, ranks, workers=0, **extra)`` -> a datamodule of that rank."""
    from energon_plugins import EnergonMultiModalDataModule

    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )

    def make(rank: int, ranks: int, workers: int = 0, **extra: Any) -> Any:
        arguments = {
            "seq_length": 300,
            "micro_batch_size": 2,
            "num_workers": workers,
            "shuffle_buffer_size": 10,
            "pg_collection": dp_collection(rank, ranks),
        }
        return EnergonMultiModalDataModule(str(dataset), tokenizer, processor, **{**arguments, **extra})

    return make


def keys(batch: Any) -> list[str]:
    """The sample keys of a megatron-bridge batch."""
    return [key for row in batch["__keys__"] for key in str(row).split(",") if key]


def save_run(make: Callable[..., Any], folder: Path, ranks: int, workers: int = 0) -> list[Any]:
    """Every rank reads :data:`BATCHES_BEFORE` batches and saves to ``folder``; their states."""
    states = []
    for rank in range(ranks):
        datamodule = make(rank, ranks, workers)
        loader = datamodule.train_dataloader()
        try:
            for _ in range(BATCHES_BEFORE):
                next(loader)
            datamodule.save_checkpoint(folder)
            states.append(pickle.loads(pickle.dumps(loader.save_state())))
        finally:
            loader.close()
    return states


def read_run(
    make: Callable[..., Any], ranks: int, restore: Callable[[Any], None], workers: int = 0
) -> list[list[str]]:
    """The keys each rank of ``ranks`` reads in :data:`BATCHES_AFTER` batches after
    ``restore(datamodule)``."""
    seen = []
    for rank in range(ranks):
        datamodule = make(rank, ranks, workers)
        restore(datamodule)
        loader = datamodule.train_dataloader()
        try:
            seen.append([key for _ in range(BATCHES_AFTER) for key in keys(next(loader))])
        finally:
            loader.close()
    return seen


def write_bridge_checkpoint(
    root: Path, states: list[Any], *, tracker: str = "txt", subdir: str = "energon"
) -> Path:
    """A Megatron-Bridge checkpoint root as Bridge lays it out: the tracker file naming
    :data:`ITERATION`, the model's ``iter_NNNNNNN`` folder, and the loader states
    ``{"dataloader_state_dict": state}`` (no format, no fingerprint) in
    ``ROOT/{subdir}/iter_NNNNNNN/train_dataloader_dprank{NNN}.pt``; returns that folder."""
    name = f"iter_{ITERATION:07d}"
    (root / name).mkdir(parents=True)
    (root / name / "run_config.yaml").write_text("model: {}\n", encoding="utf-8")
    if tracker == "txt":
        (root / "latest_checkpointed_iteration.txt").write_text(f"{ITERATION}\n", encoding="utf-8")
    else:
        torch.save({"step": torch.tensor(ITERATION, dtype=torch.int64)}, root / "latest_train_state.pt")
    folder = root / subdir / name if subdir else root / name
    folder.mkdir(parents=True, exist_ok=True)
    for rank, state in enumerate(states):
        torch.save({"dataloader_state_dict": state}, folder / f"train_dataloader_dprank{rank:03d}.pt")
    return folder
