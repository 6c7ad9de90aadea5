"""Which loaders freeze the garbage collector's heap, and when a validation pass may.

Energon's ``GcDataset`` runs ``gc.freeze()`` when an iteration starts, ``gc.collect()`` every
10 batches, and ``gc.unfreeze()`` for the whole process when the iteration ends. A collection
scans only what is not frozen, so with the heap frozen it costs next to nothing; without, it
scans every object of the process (a model's worth beside the loader). Loaders in worker
processes freeze their own heaps and are left as Energon builds them. In the main process
(0 workers) two loaders must not undo each other:

- The training loader freezes as Energon sets it (:func:`freezes_heap`).
- A validation loader does not let Energon freeze (the end of a pass would unfreeze the heap
  under the training loader for the rest of training). Instead each pass goes through
  :func:`frozen_for_pass`: it freezes the heap for the pass when nothing has it frozen (an
  evaluation-only script: passes 1.7x faster beside half a million objects,
  ``benchmarks/memory/validation_heap.py``), and at the end of the pass gives the freeze back only if
  no training loader of this process started an iteration meanwhile (that iteration froze the
  heap too, and its freeze must stay).

Training loaders announce every iteration they start (:class:`TrainingIterations`: one per
pass over the data, as the wrapper cycles them). A training loader built outside the
datamodule (a hand-wired Energon loader) does not, so a validation pass that starts before it
and ends after its first batch unfreezes its heap, as Energon's own validation loaders always
do.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from typing import Any

_training_starts = 0
"""Iterations started in this process by training loaders that freeze its heap."""


def freezes_heap(dataset: Any, *, training: bool) -> bool:
    """Whether the loader of ``dataset`` lets Energon freeze the heap: training loaders, and
    every loader in worker processes (see the module docstring)."""
    return training or dataset.worker_config.num_workers > 0


def _freezes_main_process(loader: Any) -> bool:
    """Whether iterating ``loader`` runs an Energon ``GcDataset`` with ``freeze`` in this
    process (0 workers)."""
    from megatron.energon.wrappers.gc_dataset import GcDataset

    config = getattr(loader, "worker_config", None)
    if config is None or config.num_workers > 0:
        return False
    stack = [getattr(loader, "dataset", None)]
    while stack:
        stage = stack.pop()
        if stage is None:
            continue
        if isinstance(stage, GcDataset) and stage.freeze:
            return True
        stack.extend(getattr(stage, "datasets", None) or ())
    return False


class TrainingIterations:
    """``loader``, iterable as it is; each iteration it starts is counted first when it will
    freeze this process's heap (Energon's freeze, 0 workers)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._freezes = _freezes_main_process(loader)

    def __iter__(self) -> Iterator[Any]:
        global _training_starts
        if self._freezes:
            _training_starts += 1
        collect_before_fork(self.loader)
        return iter(self.loader)


def collect_before_fork(loader: Any) -> None:
    """Collect this process's garbage before ``loader`` forks its workers while CUDA is set up.

    A worker's first act (Energon's ``GcDataset``) is ``gc.collect()``: garbage it inherited
    (an earlier loader's pinned or device batches in a reference cycle) would be freed in the
    child, whose CUDA context is unusable after the fork, and the worker aborts with
    ``cudaErrorInitializationError`` (seen on an H100/H200 when a second device-prefetching
    loader started after the first was closed). Freed here, it never reaches a child.
    """
    if getattr(loader, "num_workers", 0) <= 0:
        return
    import torch

    if torch.cuda.is_initialized():
        gc.collect()


def frozen_for_pass(loader: Any) -> Iterable[Any]:
    """``loader``'s batches for one validation pass, under the freeze rule of the module
    docstring when the loader runs in this process without a freeze of its own."""
    config = getattr(loader, "worker_config", None)
    collect_before_fork(loader)
    if config is None or config.num_workers > 0 or _freezes_main_process(loader):
        return loader
    return _pass_under_freeze(loader)


def _pass_under_freeze(batches: Iterable[Any]) -> Iterator[Any]:
    own = gc.get_freeze_count() == 0
    starts = _training_starts
    if own:
        gc.collect()
        gc.freeze()
    try:
        yield from batches
    finally:
        if own and _training_starts == starts:
            gc.unfreeze()
