"""Energon set-up for the datamodule: worker configs, split datasets and savable loaders.

A loader is assembled in stages: a ``WorkerConfig`` from the pure data-parallel group, the
Energon dataset of the split (checked first: the split exists, the encoder can read it, a
packing buffer has an encoder that packs; its tar readers bounded by
:mod:`energon_plugins.loading.tar_members`), the bad-sample policy and skip counting
(:mod:`energon_plugins.loading.errors_policy`), the batch format
(:mod:`energon_plugins.loading.formatting`), then Energon's ``SavableDataLoader`` with the
checkpoint settings, watchdogs that stop (:mod:`energon_plugins.loading.stages`) and the
``pin_memory`` setting honoured (:mod:`energon_plugins.loading.transfer`).

The functions take the datamodule and read its attributes; the datamodule's own
``_build_worker_config`` and ``datasets_provider`` are called through it, so a training loop
that replaces them (as Megatron-Bridge's tests do) is obeyed.
"""

import logging
from typing import Any, Literal

from megatron.energon import SavableDataLoader, WorkerConfig, get_train_dataset, get_val_dataset

from energon_plugins._quiet import import_quietly
from energon_plugins.config.dataset_check import check_dataset, energon_dataset_errors, is_checked, is_remote
from energon_plugins.config.dataset_fit import check_fit
from energon_plugins.config.energon_arguments import split_energon_arguments
from energon_plugins.config.settings import PREFETCH_FACTOR, raise_issues, settings_issues
from energon_plugins.errors import ConfigError, DatasetError
from energon_plugins.loading.cache_pool import loader_cache_pool
from energon_plugins.loading.distributed import parallel_layout
from energon_plugins.loading.errors_policy import SkipCountingDataset, SkipTracker, guard_truncated_shards
from energon_plugins.loading.formatting import BatchFormatDataset, build_batch_format
from energon_plugins.loading.heap import freezes_heap
from energon_plugins.loading.source_stats import count_sources
from energon_plugins.loading.stages import finish_watchdogs
from energon_plugins.loading.tar_members import bound_tar_readers
from energon_plugins.loading.transfer import configure_pinning

logger = logging.getLogger(__name__)

Split = Literal["train", "val"]
SPLITS = ("train", "val")
"""The splits a datamodule reads."""


def build_worker_config(
    num_workers: int, split: str, pg_collection: Any, *, error_handler: Any = None, seed: int = 0
) -> WorkerConfig:
    """A ``WorkerConfig`` from ``pg_collection``'s pure DP group, else ``default_worker_config``.

    The rank and world size come from the pure data-parallel group (``pg_collection.dp``),
    never from ``dp_cp``: the context-parallel ranks of one DP replica share a pure DP rank
    and must read identical data. ``error_handler`` becomes Energon's ``global_error_handler``
    (see :mod:`energon_plugins.loading.errors_policy`); ``seed`` its ``seed_offset``.

    Raises:
        ConfigError: ``num_workers`` is not a valid worker count.
    """
    raise_issues(settings_issues({"num_workers": num_workers}))
    layout = parallel_layout(pg_collection)
    dp = getattr(pg_collection, "dp", None) if pg_collection is not None else None
    if dp is None:
        config = WorkerConfig.default_worker_config(num_workers)
    else:
        logger.debug("%s worker config: dp rank %d of %d", split, layout.dp_rank, layout.dp_size)
        config = WorkerConfig(
            rank=layout.dp_rank,
            world_size=layout.dp_size,
            num_workers=num_workers,
            data_parallel_group=layout.dp_group,
        )
    if error_handler is not None:
        config.global_error_handler = error_handler
    config.seed_offset = int(seed)
    return config


def split_encoder(datamodule: Any, split: Split) -> Any:
    """The datamodule's task encoder for ``split`` (built on first use)."""
    return datamodule.task_encoder if split == "train" else datamodule.validation_task_encoder


def split_dataset(datamodule: Any, worker_config: WorkerConfig, split: Split) -> Any:
    """The Energon dataset of ``split``, after checking the split, the encoder and packing.

    Training (and ``validation_mode="infinite"``) uses ``get_train_dataset`` with every extra
    argument; the finite validation split uses ``get_val_dataset`` with those that describe
    the dataset (see :func:`~energon_plugins.config.energon_arguments.split_energon_arguments`).

    Raises:
        ValueError: ``split`` is neither ``"train"`` nor ``"val"``.
        DatasetError: the dataset has no such split, the encoder cannot read it, Energon
            cannot parse its description, or a remote dataset cannot be opened.
        ConfigError: a packing buffer with an encoder that does not pack.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    encoder = checked_split_encoder(datamodule, split)
    with energon_dataset_errors(datamodule.path):
        return energon_dataset(datamodule, worker_config, split, encoder)


def checked_split_encoder(datamodule: Any, split: Split) -> Any:
    """``split``'s task encoder, once the split exists (local and ``msc://`` datasets), the
    encoder can read it and a packing buffer has an encoder that packs (see :func:`split_dataset`)."""
    if is_checked(datamodule.path):
        check_dataset(datamodule.path, (split,))
    encoder = split_encoder(datamodule, split)
    check_fit(encoder, datamodule.path, split)
    check_packing(encoder, datamodule.packing_buffer_size)
    return encoder


def energon_dataset(datamodule: Any, worker_config: WorkerConfig, split: Split, encoder: Any) -> Any:
    """``get_train_dataset`` (training, or the infinite validation mode) or ``get_val_dataset``;
    a remote dataset that cannot be opened becomes a :class:`DatasetError`."""
    path = datamodule.path
    common = {
        "batch_size": datamodule.micro_batch_size,
        "task_encoder": encoder,
        "worker_config": worker_config,
        "packing_buffer_size": datamodule.packing_buffer_size,
    }
    try:
        if split == "train" or datamodule.validation_mode == "infinite":
            # Training, or Megatron-Bridge's old validation: shuffled and repeating.
            dataset = get_train_dataset(
                path,
                split_part=split,
                max_samples_per_sequence=datamodule.max_samples_per_sequence,
                shuffle_buffer_size=datamodule.shuffle_buffer_size,
                **common,
                **split_energon_arguments(datamodule.kwargs, "train"),
            )
            schedule = getattr(datamodule, "blend_schedule", None)
            if split == "train" and schedule:
                scheduled_blend(dataset, schedule, path)
            return dataset
        return get_val_dataset(
            path, split_part="val", **common, **split_energon_arguments(datamodule.kwargs, "val")
        )
    except (OSError, KeyError, ValueError, AssertionError) as exc:
        if not is_remote(path) or isinstance(exc, DatasetError):
            raise
        text = " ".join(str(exc).split())[:300]
        raise DatasetError(
            f"{path}: cannot open the {split!r} split of this remote dataset ({type(exc).__name__}: {text})"
        ) from exc


def scheduled_blend(dataset: Any, schedule: Any, path: str) -> None:
    """Put the blend ``schedule`` (``(at, {entry: weight})`` pairs) in place of the training
    blend's fixed weights (:mod:`~energon_plugins.loading.blend_schedule`)."""
    from energon_plugins.config.blend_plan import blend_entries
    from energon_plugins.loading.blend_schedule import schedule_blend

    schedule_blend(dataset, schedule, path, {entry.path: entry.sources for entry in blend_entries(path)})


def check_packing(encoder: Any, packing_buffer_size: int | None) -> None:
    """A packing buffer needs an encoder that packs; say so instead of Energon's assert.

    Raises:
        ConfigError: the encoder does not implement Energon's packing methods.
    """
    if packing_buffer_size is None:
        return
    overridden = getattr(encoder, "_is_overridden", None)
    if overridden is None:
        return
    missing = [
        name
        for name in ("select_samples_to_pack", "pack_selected_samples")
        if not overridden(getattr(encoder, name))
    ]
    if missing:
        raise ConfigError(
            f"packing_buffer_size={packing_buffer_size} needs a task encoder that packs, "
            f"but {type(encoder).__name__} does not implement {' and '.join(missing)}; "
            "select a packing strategy the encoder supports, or set packing_buffer_size=None"
        )


def loader_dataset(datamodule: Any, num_workers: int, split: Split) -> Any:
    """The Energon dataset of ``split`` under the bad-sample policy, with skip counting and
    the batch format applied.

    The policy is the task encoder's ``on_error`` (``"skip"`` if it has none); it applies to
    Energon's decoding errors and to truncated shards too.
    """
    encoder = split_encoder(datamodule, split)
    if datamodule.packing_buffer_size is not None:
        # Packed batches carry megatron-core's PackedSeqParams: unpickling them from a
        # worker would import megatron-core here, with its warnings. Import it quietly now.
        import_quietly("megatron.core.packed_seq_params")
    tracker = SkipTracker(getattr(encoder, "on_error", "skip"))
    worker_config = datamodule._build_worker_config(num_workers, split=split, error_handler=tracker)
    dataset = datamodule.datasets_provider(worker_config, split=split)
    bound_tar_readers(dataset)  # before the guard wraps the readers
    guard_truncated_shards(dataset, tracker)
    dataset = count_sources(dataset, tracker, datamodule.path, split, encoder)  # before the format
    fmt, label = build_batch_format(datamodule.batch_format, datamodule.build_context(split))
    if fmt is not None:  # applied to every batch, in the workers
        dataset = BatchFormatDataset(dataset, fmt, label=label, encoder=encoder)
    return SkipCountingDataset(dataset, tracker, encoder)


def pinned(loader: Any, pin_memory: bool) -> Any:
    """``loader``, set to pin its batches only if ``pin_memory`` (and CUDA is available)."""
    configure_pinning(loader, pin_memory)
    return loader


def savable_loader(datamodule: Any, dataset: Any, *, training: bool = True) -> SavableDataLoader:
    """Energon's ``SavableDataLoader`` over ``dataset`` with the datamodule's checkpoint and
    pinning settings and its cache pool (:mod:`~energon_plugins.loading.cache_pool`), its
    watchdogs set to stop.

    With ``device`` set, each worker keeps one internal checkpoint more than Energon's default:
    the batch held ahead on the device makes a saved state one batch older than what the
    workers have prefetched, and with one worker Energon's window (2 x workers + 1) no longer
    reaches it ("No checkpoint found", seen on an H200).
    """
    kept = datamodule.n_checkpoints
    if getattr(datamodule, "device", None) is not None and dataset.worker_config.num_workers > 0:
        kept = max(kept or 0, PREFETCH_FACTOR * dataset.worker_config.num_workers + 2)
    loader = SavableDataLoader(
        dataset,
        checkpoint_every_sec=datamodule.checkpoint_every_sec,
        checkpoint_every_min_n_samples=datamodule.checkpoint_every_min_n_samples,
        n_checkpoints=kept,
        gc_freeze_at_start=freezes_heap(dataset, training=training),
        cache_pool=loader_cache_pool(datamodule, "train" if training else "val"),
    )
    return pinned(finish_watchdogs(loader), datamodule.pin_memory)
