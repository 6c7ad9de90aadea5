"""Building the datamodule's validation loader, in either ``validation_mode``.

``"finite"`` (the default): a :class:`~energon_plugins.loading.validation.ValidationLoader`
over Energon's basic loader and ``get_val_dataset`` (every val sample once per pass, in order,
the same batches at every evaluation, equal length on every DP rank: a rank with fewer real
batches pads with zero-loss batches made from the split's first batch, read as rank 0 of 1
through the same stages, so fillers have the batch format the loop reads). ``"infinite"``:
Megatron-Bridge's old behaviour, a cycling savable loader over the shuffled val split.

The finite loader agrees on its length through a
:class:`~energon_plugins.loading.distributed.DataGroup`, created here on every data-parallel
rank together: a rank stopped later makes the others raise
:class:`~energon_plugins.errors.RankTimeoutError` naming it within
``ENERGON_PLUGINS_DATA_TIMEOUT`` seconds, instead of hanging for the training group's timeout.
"""

from collections.abc import Callable
from functools import partial
from typing import Any

from megatron.energon import WorkerConfig
from megatron.energon.savable_loader import BasicDataLoader

from energon_plugins.loading.assembly import loader_dataset, pinned
from energon_plugins.loading.cache_pool import loader_cache_pool
from energon_plugins.loading.dataloader import EnergonDataloader
from energon_plugins.loading.distributed import DataGroup
from energon_plugins.loading.errors_policy import SkipCounts
from energon_plugins.loading.heap import freezes_heap
from energon_plugins.loading.training import infinite_validation_loader
from energon_plugins.loading.validation import RestartingDataset, ValidationLoader


def build_validation_loader(datamodule: Any) -> ValidationLoader | EnergonDataloader:
    """The validation loader of the datamodule's ``validation_mode``."""
    if datamodule.validation_mode == "infinite":
        return infinite_validation_loader(datamodule)
    return finite_validation_loader(datamodule)


def finite_validation_loader(
    datamodule: Any,
    *,
    view: Any = None,
    template: Callable[[], Any] | None = None,
    what: str = "len(val_dataloader())",
) -> ValidationLoader:
    """The ``"finite"`` validation loader: one pass per evaluation, the same every time.

    A collective when there are several data-parallel ranks: each creates (or reuses) the
    data side's gloo group here. ``view``: what the dataset is built from (default: the
    datamodule; :mod:`~energon_plugins.loading.per_source_validation` passes one source's
    view), ``template``: the batch fillers are made from on a rank with none of its own
    (default: the split's first batch), ``what``: the length's name in a timeout message.
    """
    data_group = DataGroup(datamodule.parallel_layout())
    encoder = datamodule.validation_task_encoder
    built_from = datamodule if view is None else view
    dataset = RestartingDataset(loader_dataset(built_from, datamodule.num_val_workers, "val"))
    loader = pinned(evaluation_loader(dataset, loader_cache_pool(datamodule, "val")), datamodule.pin_memory)
    overridden = getattr(encoder, "_is_overridden", None)
    grouped = overridden is not None and overridden(encoder.batch_group_criterion)
    # Plain batching: Energon's len() bounds the pass (exact unless samples are skipped);
    # packed or grouped batches are counted by reading one pass.
    count_by_pass = datamodule.packing_buffer_size is not None or grouped
    template = template or partial(first_val_batch, SingleRankView(datamodule), datamodule.pin_memory)
    return ValidationLoader(
        loader,
        pass_length=partial(data_group.max_of, what=what),
        count_by_pass=count_by_pass,
        batches_per_evaluation=datamodule.val_batches_per_evaluation,
        template=template,
        ignore_index=int(getattr(datamodule.multimodal_sample_config, "ignore_index", -100)),
    )


def evaluation_loader(dataset: Any, cache_pool: Any = None) -> BasicDataLoader:
    """Energon's basic (not savable) loader for a validation split: no watchdog (Energon 7.4's
    ``WatchdogDataset`` starts a thread per iteration that it never stops, one leaked thread
    per pass), and the heap freeze left to :mod:`energon_plugins.loading.heap`; ``cache_pool``:
    the datamodule's (:mod:`~energon_plugins.loading.cache_pool`)."""
    return BasicDataLoader(
        dataset,
        watchdog_timeout_seconds=None,
        gc_freeze_at_start=freezes_heap(dataset, training=False),
        cache_pool=cache_pool,
    )


class SingleRankView:
    """The datamodule as :func:`~energon_plugins.loading.assembly.loader_dataset` reads it, as
    rank 0 of 1 without workers: the split's first batch through the same stages as the loader
    (encoder, batch format, source tags), whatever this rank's share is."""

    def __init__(self, datamodule: Any) -> None:
        self._datamodule = datamodule

    def __getattr__(self, name: str) -> Any:
        return getattr(self._datamodule, name)

    def _build_worker_config(self, num_workers: int, split: str = "val", *, error_handler: Any = None) -> Any:
        """Rank 0 of 1, no workers, with the datamodule's error handler."""
        config = WorkerConfig(rank=0, world_size=1, num_workers=0)
        if error_handler is not None:
            config.global_error_handler = error_handler
        return config


def first_val_batch(view: Any, pin_memory: bool) -> Any:
    """The first batch of ``view``'s validation split read as a single rank through the
    loader's own stages (``None`` if empty): what a rank without validation samples of its own
    pads with, so the fillers have the format the loop reads."""
    dataset = loader_dataset(view, 0, "val")
    loader = pinned(evaluation_loader(dataset), pin_memory)
    for batch in SkipCounts().filter(loader):  # the batch, without the skip counts it carries
        return batch
    return None
