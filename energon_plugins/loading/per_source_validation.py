"""One finite validation loader per source: ``EnergonMultiModalDataModule.val_dataloaders()``.

A *source* is named as everywhere else (:func:`~energon_plugins.loading.source_stats.source_names`):
the metadataset leaf's ``path`` as its YAML writes it, or, for a single dataset, the ``path``
the datamodule was given. Energon's ``get_val_datasets`` builds one validation dataset per
dataset of the val split (in the order of the YAML, nested metadatasets flattened; a join is
one dataset, named by its first member); each becomes a
:class:`~energon_plugins.loading.validation.ValidationLoader` built exactly as
``val_dataloader()``'s (:func:`~energon_plugins.loading.validation_loader.finite_validation_loader`,
over a :class:`SourceView`), so each has the same guarantees: every sample of that source's
val split once per pass, the same batches at every evaluation, and a length agreed over the
data-parallel group (shorter ranks pad with zero-loss fillers made from a batch of the same
source, so every row's ``__sources__`` names that source).

Only ``validation_mode="finite"`` can hold those guarantees: the ``"infinite"`` mode shuffles
and repeats, and is refused by name. ``val_batches_per_evaluation`` applies to each loader.
"""

from functools import partial
from typing import Any

from megatron.energon import WorkerConfig, get_val_datasets

from energon_plugins.config.dataset_check import energon_dataset_errors
from energon_plugins.config.energon_arguments import split_energon_arguments
from energon_plugins.errors import ConfigError
from energon_plugins.loading.assembly import checked_split_encoder
from energon_plugins.loading.source_stats import normalized, source_names
from energon_plugins.loading.validation import ValidationLoader
from energon_plugins.loading.validation_loader import (
    SingleRankView,
    finite_validation_loader,
    first_val_batch,
)


def val_dataloaders(datamodule: Any) -> dict[str, ValidationLoader]:
    """``{source: finite validation loader}`` of the datamodule's val split, in YAML order.

    A collective with several data-parallel ranks (as ``val_dataloader()``): call it on every
    rank, and take ``len()`` of the loaders on every rank in the same order.

    Raises:
        ConfigError: ``validation_mode`` is not ``"finite"``, or two datasets of the val split
            have the same source name (the same ``path`` listed twice, e.g. with different
            subflavors), so their loaders could not be told apart.
        DatasetError: the dataset has no val split, or Energon cannot load it.
    """
    if datamodule.validation_mode != "finite":
        raise ConfigError(
            f"val_dataloaders(): validation_mode={datamodule.validation_mode!r} gives a shuffled, "
            "repeating validation stream, without the per-source guarantees (each val sample once "
            "per pass, the same batches every evaluation); set validation_mode='finite', or use "
            "val_dataloader()"
        )
    checked_split_encoder(datamodule, "val")  # the split exists, the encoder reads it
    names = val_source_names(datamodule)
    loaders: dict[str, ValidationLoader] = {}
    for index, name in enumerate(names):
        loaders[name] = finite_validation_loader(
            datamodule,
            view=SourceView(datamodule, index),
            template=partial(first_source_batch, datamodule, index),
            what=f"len(val_dataloaders()[{name!r}])",
        )
    return loaders


def val_source_names(datamodule: Any) -> list[str]:
    """The source name of each dataset ``get_val_datasets`` builds for the datamodule's val
    split, in its order.

    Raises:
        ConfigError: two datasets have the same source name.
    """
    path = datamodule.path
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    factories = [factory for _, factory in source_val_datasets(datamodule, config)]
    if not str(path).endswith((".yaml", ".yml")):
        return [str(path)] * len(factories)  # a single dataset: the path as given
    written = source_names(path, "val")
    names = [written.get(normalized(factory.paths[0]), str(factory.paths[0])) for factory in factories]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(
            f"val_dataloaders(): {path}: the val split lists {', '.join(map(repr, repeated))} more "
            "than once, so one loader per source cannot tell them apart; list each dataset once "
            "in splits.val (or use val_dataloader(), whose __sources__ name them alike)"
        )
    return names


def source_val_datasets(datamodule: Any, worker_config: WorkerConfig) -> list[tuple[Any, Any]]:
    """Energon's ``get_val_datasets`` for the datamodule's val split: ``(dataset, factory)``
    per dataset, with the datamodule's encoder, batch size, packing and dataset arguments."""
    with energon_dataset_errors(datamodule.path):
        return get_val_datasets(
            datamodule.path,
            split_part="val",
            batch_size=datamodule.micro_batch_size,
            task_encoder=datamodule.validation_task_encoder,
            worker_config=worker_config,
            packing_buffer_size=datamodule.packing_buffer_size,
            **split_energon_arguments(datamodule.kwargs, "val"),
        )


class SourceView:
    """The datamodule as :func:`~energon_plugins.loading.assembly.loader_dataset` reads it, with
    the val dataset replaced by the ``index``-th source's (everything else delegated: encoder,
    worker config, batch format, ``path`` for the source names).

    Args:
        datamodule: the :class:`~energon_plugins.loading.datamodule.EnergonMultiModalDataModule`.
        index: the source's place in ``get_val_datasets``' list.
    """

    def __init__(self, datamodule: Any, index: int) -> None:
        self._datamodule = datamodule
        self._index = index

    def __getattr__(self, name: str) -> Any:
        return getattr(self._datamodule, name)

    def datasets_provider(self, worker_config: Any, split: str = "val") -> Any:
        """The source's val dataset (only the val split has sources of its own here)."""
        if split != "val":
            raise ValueError(f"a source view reads the 'val' split only, not {split!r}")
        return source_val_datasets(self._datamodule, worker_config)[self._index][0]


def first_source_batch(datamodule: Any, index: int) -> Any:
    """The first batch of the ``index``-th source's val split read as a single rank, through
    the same stages as the loader (so fillers keep its format and ``__sources__``); ``None``
    if that split is empty."""
    return first_val_batch(SingleRankView(SourceView(datamodule, index)), datamodule.pin_memory)
