"""The five component contracts as :class:`typing.Protocol` classes, for plugin authors.

A factory registered for a kind returns an object that satisfies the kind's protocol; a type
checker (mypy, pyright) then checks a plugin's component against what the core calls on it::

    from energon_plugins.host.protocols import PackingStrategyProtocol

    def build_my_packing(options, context) -> PackingStrategyProtocol:
        return MyPacking(options)

Every protocol is :func:`~typing.runtime_checkable`: ``isinstance(obj, PackingStrategyProtocol)``
checks that the members exist (not their signatures). :data:`PROTOCOL_FOR_KIND` maps each kind
to its protocol. Only :mod:`typing` is imported here: no torch, transformers or Energon.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "PROTOCOL_FOR_KIND",
    "BatchFormatProtocol",
    "ImageProcessorProtocol",
    "PackingStrategyProtocol",
    "SourceFilesProtocol",
    "SourceFormatProtocol",
    "TaskEncoderProtocol",
]


@runtime_checkable
class TaskEncoderProtocol(Protocol):
    """What the datamodule and Energon's ``get_train_dataset`` / ``get_val_dataset`` use of a
    task encoder (kind ``task_encoder``).

    A ``megatron.energon.TaskEncoder`` subclass (or
    :class:`~energon_plugins.PluginTaskEncoder`, which wires packing to the selected strategy)
    has every member; the registry also checks that a factory returns one. Optional members the
    core reads when present: ``on_error`` (``"skip"`` or ``"raise"``), ``options``,
    ``supported_sample_types``, ``preflight_problems(...)``, ``image_processor``.
    """

    decoder: Any
    """The Energon ``SampleDecoder`` that datasets are loaded with (``None``: no decoding)."""

    def build_train_datasets(self, *, datasets: Any, worker_config: Any, **kwargs: Any) -> Any:
        """Combine the loaded training datasets into one savable dataset of batches."""
        ...

    def build_val_datasets(self, *, datasets: Any, worker_config: Any, **kwargs: Any) -> Any:
        """Combine the loaded validation datasets into one savable dataset of batches."""
        ...

    def encode_sample(self, sample: Any) -> Any:
        """Turn one loaded sample into an encoded sample (tokens, images, labels)."""
        ...

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        """Group a packing buffer of encoded samples into packs."""
        ...

    def pack_selected_samples(self, samples: list[Any]) -> Any:
        """Join the samples of one pack into one encoded sample."""
        ...

    def batch_group_criterion(self, sample: Any) -> tuple[Any, int | None]:
        """The group key and batch size of a sample (for grouped batching)."""
        ...

    def batch(self, samples: list[Any]) -> Any:
        """Collate encoded samples into one batch."""
        ...

    def encode_batch(self, batch: Any) -> Any:
        """Finish a collated batch in the worker (before the batch format)."""
        ...


@runtime_checkable
class ImageProcessorProtocol(Protocol):
    """An image processor (kind ``image_processor``), called like a Hugging Face one.

    Optional members a task encoder reads when present: ``image_input`` (``"bytes"``,
    ``"uint8"`` or ``"pil"``: the form it wants images in), ``output_size_for(height, width)``
    and ``grid_for(height, width)`` (the output size or patch grid of an image, before any pixel
    is processed).
    """

    def __call__(
        self, images: Sequence[Any] = ..., return_tensors: str = "pt", **kwargs: Any
    ) -> Mapping[str, Any]:
        """Process ``images``; the mapping holds ``pixel_values`` (and e.g. ``image_grid_thw``)."""
        ...


@runtime_checkable
class PackingStrategyProtocol(Protocol):
    """A packing strategy (kind ``packing_strategy``)."""

    name: str
    """The strategy's name, as shown in messages and statistics."""

    def select(self, lengths: Sequence[int], capacity: int) -> list[list[int]]:
        """Group buffer indices into packs.

        Each group's total length is at most ``capacity``; each index appears at most once.
        """
        ...


@runtime_checkable
class BatchFormatProtocol(Protocol):
    """A batch format (kind ``batch_format``): what one training loop reads.

    :class:`~energon_plugins.BatchFormat` is the base class of the built-ins; a batch that is
    not the project's collated batch should pass through unchanged.
    """

    def __call__(self, batch: Any) -> Any:
        """Turn the project's collated batch into what the training loop reads."""
        ...


@runtime_checkable
class SourceFormatProtocol(Protocol):
    """A source format (kind ``source_format``): a reader that ``energon-plugins convert`` uses.

    ``scan`` is cheap and runs in one process; ``load`` may run in worker processes, so the
    reader and its payloads must be picklable. A reader may also list the files it reads
    (:class:`SourceFilesProtocol`), which ``convert`` records to detect a changed source.
    """

    def scan(self, source: Path) -> Iterable[tuple[str, Any]]:
        """Yield ``(record key, payload)`` for every record of ``source``, in a stable order."""
        ...

    def load(self, payload: Any) -> Any:
        """Read one record from its payload into a :class:`~energon_plugins.SourceRecord`."""
        ...


@runtime_checkable
class SourceFilesProtocol(Protocol):
    """The optional member of a source format: the files a ``source`` is read from."""

    def source_files(self, source: Path) -> list[Path]:
        """The files that ``scan(source)`` reads."""
        ...


PROTOCOL_FOR_KIND: dict[str, type] = {
    "task_encoder": TaskEncoderProtocol,
    "image_processor": ImageProcessorProtocol,
    "packing_strategy": PackingStrategyProtocol,
    "batch_format": BatchFormatProtocol,
    "source_format": SourceFormatProtocol,
}
"""The protocol a component of each kind satisfies: ``kind -> Protocol class``."""
