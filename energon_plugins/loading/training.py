"""The training loader: Energon's pipeline per worker, or a fixed set of data partitions.

By default each worker runs the pipeline Energon builds for it (:func:`training_loader`).
:func:`partitioned_loader` splits the stream into ``data_partitions`` partitions instead
(:mod:`energon_plugins.loading.partitions`): the datamodule builds it from the start when
``data_partitions`` is set, and :class:`~energon_plugins.loading.dataloader.EnergonDataloader`
builds it (through the ``rebuild`` callback) when it restores the states of a run with another
number of ranks or workers.
"""

import copy
import functools
from typing import Any

from energon_plugins.config.dataset_check import energon_dataset_errors
from energon_plugins.errors import ConfigError
from energon_plugins.loading.assembly import (
    Split,
    checked_split_encoder,
    energon_dataset,
    loader_dataset,
    savable_loader,
    split_encoder,
)
from energon_plugins.loading.checkpoint import loader_fingerprint
from energon_plugins.loading.dataloader import EnergonDataloader
from energon_plugins.loading.elastic import Layout
from energon_plugins.loading.errors_policy import SkipCountingDataset, SkipTracker, guard_truncated_shards
from energon_plugins.loading.formatting import BatchFormatDataset, build_batch_format
from energon_plugins.loading.partitions import (
    InterleavedPartitionsDataset,
    PartitionStream,
    PartitionWorkerConfig,
    owned_partitions,
    physical_workers,
)
from energon_plugins.loading.source_stats import count_sources
from energon_plugins.loading.tar_members import bound_tar_readers


def virtual_workers_for(partitions: int, num_workers: int) -> int:
    """The virtual workers per virtual rank of ``partitions`` partitions started with
    ``num_workers`` workers: ``num_workers`` when it divides the partitions, else 1."""
    return num_workers if num_workers > 0 and partitions % num_workers == 0 else 1


def training_loader(datamodule: Any) -> EnergonDataloader:
    """The cycling training loader, with the fingerprint its saved states carry."""
    rebuild = functools.partial(partitioned_loader, datamodule)
    partitions = getattr(datamodule, "data_partitions", None)
    interleaver = None
    if partitions is None:
        loader = savable_loader(datamodule, loader_dataset(datamodule, datamodule.num_workers, "train"))
        config = loader.worker_config
        layout = Layout.plain(config.world_size, config.rank, datamodule.num_workers)
    else:
        loader, interleaver, layout = rebuild(
            partitions, virtual_workers_for(partitions, datamodule.num_workers)
        )
        config = loader.worker_config
    fingerprint = loader_fingerprint(datamodule, dp_rank=config.rank, dp_world_size=config.world_size)
    return EnergonDataloader(
        loader,
        device=datamodule.device,
        fingerprint=fingerprint,
        layout=layout,
        rebuild=rebuild,
        interleaver=interleaver,
    )


def infinite_validation_loader(datamodule: Any) -> EnergonDataloader:
    """``validation_mode="infinite"``: a shuffled, repeating val split, with the same restore
    paths as training (its position moves to another layout like the training loader's)."""
    dataset = loader_dataset(datamodule, datamodule.num_val_workers, "val")
    loader = savable_loader(datamodule, dataset, training=False)
    config = loader.worker_config
    layout = Layout.plain(config.world_size, config.rank, datamodule.num_val_workers)
    rebuild = functools.partial(partitioned_loader, datamodule, split="val")
    return EnergonDataloader(loader, layout=layout, rebuild=rebuild)


def partitioned_loader(
    datamodule: Any, partitions: int, virtual_workers: int, split: Split = "train"
) -> tuple[Any, Any, Layout]:
    """``(savable loader, interleaver, layout)``: this rank's share of ``partitions`` data
    partitions (``virtual_workers`` per virtual rank) of ``split``'s repeating stream, each
    worker taking its own in turn.

    Raises:
        ConfigError: more workers over all ranks than partitions.
    """
    checked_split_encoder(datamodule, split)
    workers = datamodule.num_workers if split == "train" else datamodule.num_val_workers
    physical = datamodule._build_worker_config(workers, split=split)
    layout = Layout(partitions, virtual_workers, physical.world_size, physical.rank, workers)
    if physical_workers(layout.dp_size, workers) > partitions:
        raise ConfigError(
            f"data_partitions: {partitions} partitions cannot feed {layout.dp_size} ranks x "
            f"{max(workers, 1)} workers: use at most {max(partitions // layout.dp_size, 1)} workers "
            f"per rank, or start the run with data_partitions >= {physical_workers(layout.dp_size, workers)}"
        )
    streams = {p: _partition_stream(datamodule, p, layout, split) for p in layout.owned()}
    owners = functools.partial(owned_partitions, partitions, layout.dp_size, workers, layout.dp_rank)
    top = InterleavedPartitionsDataset(streams, owners, worker_config=physical, layout=layout.as_dict())
    return savable_loader(datamodule, top, training=split == "train"), top, layout


def _partition_stream(datamodule: Any, partition: int, layout: Layout, split: Split) -> PartitionStream:
    """Partition ``partition``'s pipeline: the Energon dataset of its virtual worker, the
    bad-sample policy, the batch format and skip counting, with its own task-encoder copy
    (the encoder's counters are per stream; tokenizer and processor are shared)."""
    shared = {
        id(part): part for part in (datamodule.tokenizer, datamodule.image_processor) if part is not None
    }
    encoder = copy.deepcopy(split_encoder(datamodule, split), shared)
    tracker = SkipTracker(getattr(encoder, "on_error", "skip"))
    config = PartitionWorkerConfig(
        partition,
        layout.partitions,
        layout.virtual_workers,
        seed_offset=getattr(datamodule, "seed", 0),
        error_handler=tracker,
    )
    with energon_dataset_errors(datamodule.path):
        dataset = energon_dataset(datamodule, config, split, encoder)
    bound_tar_readers(dataset)
    guard_truncated_shards(dataset, tracker)
    dataset = count_sources(dataset, tracker, datamodule.path, split, encoder)
    fmt, label = build_batch_format(datamodule.batch_format, datamodule.build_context(split))
    if fmt is not None:
        dataset = BatchFormatDataset(dataset, fmt, label=label, encoder=encoder)
    return PartitionStream(partition, SkipCountingDataset(dataset, tracker, encoder), config)
