"""``EnergonMultiModalDataModule``: the seed datamodule, on Megatron-Energon's real loaders.

The constructor is light: it checks its arguments and the dataset path (one clear error
before any worker starts) and stores everything. Task encoders are built on first use from
the final attribute values; loaders are built by :meth:`train_dataloader` /
:meth:`val_dataloader`.
"""

import logging
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from energon_plugins._quiet import import_quietly
from energon_plugins.config.model import DEFAULT_BATCH_FORMAT
from energon_plugins.host.context import BuildContext
from energon_plugins.loading.dataloader import EnergonDataloader, FiniteDataloader
from energon_plugins.loading.dataset_check import check_dataset, energon_dataset_errors
from energon_plugins.loading.dataset_fit import check_fit
from energon_plugins.errors import ConfigError
from energon_plugins.encoding.sample_config import MultiModalSampleConfig

logger = logging.getLogger(__name__)

SPLITS = ("train", "val")
#: Keyword arguments of ``get_train_dataset`` that describe the dataset itself and therefore
#: also apply to the validation split.
_DATASET_KWARGS = ("split_config", "dataset_config")


def _check_int(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")


def _encoder_selection(name: str, value: Any) -> tuple[str, Any] | None:
    """``(plugin name, options)`` when ``value`` selects an encoder by name, else ``None``."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, Mapping):
        unknown = set(value) - {"name", "options"}
        if unknown or "name" not in value:
            raise ConfigError(
                f"{name}: expected {{name, options}}, got keys {sorted(map(str, value))}"
            )
        return str(value["name"]), value.get("options")
    return None


class EnergonMultiModalDataModule:
    """A DataModule for multimodal (image and text) Energon datasets.

    Args:
        path: an Energon dataset folder (prepared, with ``.nv-meta/``) or a metadataset YAML.
        tokenizer: a Hugging Face tokenizer (with a chat template and the image token).
        image_processor: called as ``proc(images=[...], return_tensors="pt")``; a raw
            transformers image processor is wrapped so it gets 8-bit images.
        seq_length: maximum tokens per sample (and padded batch width).
        micro_batch_size: samples per batch, for training and validation.
        global_batch_size: kept for the training loop (not used for loading).
        num_workers: loader worker processes for training (0: load in this process).
        num_val_workers: worker processes for validation (default: ``num_workers``).
        pin_memory: pin batches in page-locked host memory (only where CUDA is available;
            Energon 7.4 hard-codes ``True``, this setting overrides it before iteration).
        shuffle_buffer_size: size of Energon's sample shuffle buffer (training).
        max_samples_per_sequence: samples read in a row from one shard slice.
        multimodal_sample_config: a :class:`MultiModalSampleConfig` (default one if None).
        task_encoder: an Energon ``TaskEncoder``, a registered name, ``{name, options}``, or
            ``None`` for the built-in ``multimodal`` encoder.
        decoder_seq_length: for encoder-decoder models.
        packing_buffer_size: Energon's packing buffer size (None: no packing).
        validation_task_encoder: as ``task_encoder``, for validation (default: the training
            encoder, or, for a named one, the same plugin built with ``split="val"``).
        pg_collection: a megatron-core ``ProcessGroupCollection``; its pure ``dp`` group
            gives the data-parallel rank and world size.
        validation_mode: ``"finite"`` (default; Energon's ``get_val_dataset``: every val
            sample once, in order, reproducible) or ``"infinite"`` (Megatron-Bridge's
            behaviour: a shuffled, repeating val split).
        packing: a packing strategy object (``select(lengths, capacity)``) for the encoder.
        device: copy every training batch to this device one batch ahead, on a side CUDA
            stream (``None``: leave batches on the host; without CUDA a quiet no-op).
        batch_format: what the training loop reads: a registered batch format's name,
            ``{name, options}``, a callable ``fmt(batch)``, or ``None`` for the task encoder's
            batch as it is. Default: the built-in ``megatron-bridge`` (Megatron-Bridge's
            ``vlm_step``); ``megatron-lm`` and ``hf`` are built in too. It runs in the loader
            workers, after the task encoder's ``encode_batch``.
        **kwargs: passed to Energon's ``get_train_dataset``.
    """

    def __init__(
        self,
        path: str,
        tokenizer: Any,
        image_processor: Any,
        seq_length: int = 2048,
        micro_batch_size: int = 1,
        global_batch_size: int = 1,
        num_workers: int = 1,
        num_val_workers: int | None = None,
        pin_memory: bool = True,
        shuffle_buffer_size: int = 100,
        max_samples_per_sequence: int | None = None,
        multimodal_sample_config: MultiModalSampleConfig | None = None,
        task_encoder: Any = None,
        decoder_seq_length: int | None = None,
        packing_buffer_size: int | None = None,
        validation_task_encoder: Any = None,
        pg_collection: Any = None,
        *,
        validation_mode: Literal["finite", "infinite"] = "finite",
        packing: Any = None,
        device: Any = None,
        batch_format: Any = DEFAULT_BATCH_FORMAT,
        **kwargs: Any,
    ) -> None:
        _check_int("seq_length", seq_length, 1)
        _check_int("micro_batch_size", micro_batch_size, 1)
        _check_int("global_batch_size", global_batch_size, 1)
        _check_int("num_workers", num_workers, 0)
        _check_int("num_val_workers", num_val_workers, 0, allow_none=True)
        _check_int("shuffle_buffer_size", shuffle_buffer_size, 0, allow_none=True)
        _check_int("max_samples_per_sequence", max_samples_per_sequence, 1, allow_none=True)
        _check_int("decoder_seq_length", decoder_seq_length, 1, allow_none=True)
        _check_int("packing_buffer_size", packing_buffer_size, 1, allow_none=True)
        if validation_mode not in ("finite", "infinite"):
            raise ConfigError(
                f"validation_mode must be 'finite' or 'infinite', got {validation_mode!r}"
            )
        if multimodal_sample_config is None:
            multimodal_sample_config = MultiModalSampleConfig()
        elif isinstance(multimodal_sample_config, Mapping):
            import pydantic

            try:
                multimodal_sample_config = MultiModalSampleConfig.model_validate(
                    dict(multimodal_sample_config)
                )
            except pydantic.ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()
                )
                raise ConfigError(f"multimodal_sample_config: {problems}") from exc
        elif not isinstance(multimodal_sample_config, MultiModalSampleConfig):
            raise ConfigError(
                "multimodal_sample_config must be a MultiModalSampleConfig or a mapping, got "
                f"{type(multimodal_sample_config).__name__}"
            )
        check_dataset(path, ("train",))

        self.path = str(path)
        self.tokenizer = tokenizer
        self.image_processor = self._adapt_image_processor(image_processor)
        self.seq_length = seq_length
        self.micro_batch_size = micro_batch_size
        self.global_batch_size = global_batch_size
        self.num_workers = num_workers
        self.num_val_workers = num_workers if num_val_workers is None else num_val_workers
        self.pin_memory = pin_memory
        self.shuffle_buffer_size = shuffle_buffer_size
        self.max_samples_per_sequence = max_samples_per_sequence
        self.multimodal_sample_config = multimodal_sample_config
        self.decoder_seq_length = decoder_seq_length
        self.packing_buffer_size = packing_buffer_size
        self.pg_collection = pg_collection
        self.validation_mode = validation_mode
        self.packing = packing
        self.device = device
        self.kwargs = kwargs
        self.init_global_step = 0

        self._task_encoder_arg = task_encoder
        self._val_task_encoder_arg = validation_task_encoder
        # Resolve named encoders now, so an unknown name or bad options fail here.
        for label, arg in (
            ("task_encoder", task_encoder),
            ("validation_task_encoder", validation_task_encoder),
        ):
            selection = _encoder_selection(label, arg)
            if selection is not None:
                self._validate_selection(*selection)
        from energon_plugins.loading.formatting import check_batch_format_arg

        check_batch_format_arg(batch_format)
        self.batch_format = batch_format
        self._task_encoder: Any = None
        self._val_task_encoder: Any = None
        self.train_dataloader_object: EnergonDataloader | None = None
        self.val_dataloader_object: Any = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config_or_path: Any, **overrides: Any) -> "EnergonMultiModalDataModule":
        """Build a datamodule from a config file, mapping or model, with overrides applied.

        Delegates to :func:`energon_plugins.config.build.build_datamodule`.
        """
        from energon_plugins.config.build import build_datamodule

        return build_datamodule(config_or_path, **overrides)

    @staticmethod
    def _adapt_image_processor(image_processor: Any) -> Any:
        if image_processor is None:
            return None
        if not callable(image_processor):
            raise ConfigError(
                "image_processor must be callable as proc(images=[...], return_tensors='pt'), "
                f"got {type(image_processor).__name__}"
            )
        from energon_plugins.encoding.image_processors.hf import wrap_image_processor

        return wrap_image_processor(image_processor)

    @staticmethod
    def _validate_selection(name: str, options: Any) -> None:
        from energon_plugins.host.manager import get_registry

        spec = get_registry().resolve("task_encoder", name)
        spec.validate_options(options)

    def build_context(self, split: Literal["train", "val"] = "train") -> BuildContext:
        """The :class:`BuildContext` handed to task-encoder factories, from current values."""
        from energon_plugins.loading.distributed import group_size

        return BuildContext(
            tokenizer=self.tokenizer,
            image_processor=self.image_processor,
            sample_config=self.multimodal_sample_config,
            seq_length=self.seq_length,
            decoder_seq_length=self.decoder_seq_length,
            micro_batch_size=self.micro_batch_size,
            packing=self.packing,
            packing_buffer_size=self.packing_buffer_size,
            split=split,
            cp_size=group_size(self.pg_collection, "cp"),
            tp_size=group_size(self.pg_collection, "tp"),
        )

    def _build_encoder(self, arg: Any, split: Literal["train", "val"]) -> Any:
        from energon_plugins.host.api import create

        selection = _encoder_selection(
            "task_encoder" if split == "train" else "validation_task_encoder", arg
        )
        if arg is None:
            selection = ("multimodal", None)
        if selection is None:
            return arg  # an encoder object
        name, options = selection
        return create("task_encoder", name, options, self.build_context(split))

    @property
    def task_encoder(self) -> Any:
        """The training task encoder (built on first access)."""
        if self._task_encoder is None:
            self._task_encoder = self._build_encoder(self._task_encoder_arg, "train")
        return self._task_encoder

    @task_encoder.setter
    def task_encoder(self, value: Any) -> None:
        selection = _encoder_selection("task_encoder", value)
        if selection is not None:
            self._validate_selection(*selection)
        self._task_encoder_arg = value
        self._task_encoder = None

    @property
    def validation_task_encoder(self) -> Any:
        """The validation task encoder (built on first access)."""
        if self._val_task_encoder is None:
            arg = self._val_task_encoder_arg
            if arg is None:
                if self._task_encoder_arg is None or _encoder_selection(
                    "task_encoder", self._task_encoder_arg
                ):
                    self._val_task_encoder = self._build_encoder(self._task_encoder_arg, "val")
                else:
                    self._val_task_encoder = self.task_encoder
            else:
                self._val_task_encoder = self._build_encoder(arg, "val")
        return self._val_task_encoder

    @validation_task_encoder.setter
    def validation_task_encoder(self, value: Any) -> None:
        selection = _encoder_selection("validation_task_encoder", value)
        if selection is not None:
            self._validate_selection(*selection)
        self._val_task_encoder_arg = value
        self._val_task_encoder = None

    # ------------------------------------------------------------------ Energon plumbing
    def _build_worker_config(
        self, num_workers: int, split: str = "train", *, error_handler: Any = None
    ) -> Any:
        """Build a ``WorkerConfig`` from ``pg_collection``, else ``default_worker_config``.

        The rank and world size come from the pure data-parallel group (``pg_collection.dp``),
        never from ``dp_cp``: the context-parallel ranks of one DP replica share a pure DP rank
        and must read identical data. ``error_handler`` becomes Energon's
        ``global_error_handler`` (see :mod:`energon_plugins.loading.errors_policy`).
        """
        config = self._worker_config(num_workers, split)
        if error_handler is not None:
            config.global_error_handler = error_handler
        return config

    def _worker_config(self, num_workers: int, split: str) -> Any:
        """The ``WorkerConfig`` of :meth:`_build_worker_config`, before the error handler."""
        import torch.distributed as dist
        from megatron.energon import WorkerConfig

        _check_int("num_workers", num_workers, 0)
        dp = getattr(self.pg_collection, "dp", None) if self.pg_collection is not None else None
        if dp is None:
            return WorkerConfig.default_worker_config(num_workers)
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError(
                "pg_collection.dp is set but torch.distributed is not initialised"
            )
        rank = dist.get_rank(dp)
        world_size = dist.get_world_size(dp)
        logger.debug("%s worker config: dp rank %d of %d", split, rank, world_size)
        return WorkerConfig(
            rank=rank,
            world_size=world_size,
            num_workers=num_workers,
            data_parallel_group=dp,
        )

    def datasets_provider(self, worker_config: Any, split: Literal["train", "val"] = "val") -> Any:
        """Return the Energon dataset of ``split`` (``"train"`` or ``"val"``).

        Raises:
            ValueError: ``split`` is neither ``"train"`` nor ``"val"``.
            DatasetError: the dataset has no such split, the encoder cannot read it, or Energon
                cannot parse its description.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        check_dataset(self.path, (split,))
        encoder = self.task_encoder if split == "train" else self.validation_task_encoder
        check_fit(encoder, self.path, split)
        self._check_packing(encoder)
        with energon_dataset_errors(self.path):
            return self._energon_dataset(worker_config, split, encoder)

    def _energon_dataset(self, worker_config: Any, split: str, encoder: Any) -> Any:
        from megatron.energon import get_train_dataset, get_val_dataset

        if split == "train" or self.validation_mode == "infinite":
            # Training, or Megatron-Bridge's validation: shuffled and repeating.
            return get_train_dataset(
                self.path,
                split_part=split,
                batch_size=self.micro_batch_size,
                task_encoder=encoder,
                worker_config=worker_config,
                packing_buffer_size=self.packing_buffer_size,
                max_samples_per_sequence=self.max_samples_per_sequence,
                shuffle_buffer_size=self.shuffle_buffer_size,
                **self.kwargs,
            )
        dataset_kwargs = {k: v for k, v in self.kwargs.items() if k in _DATASET_KWARGS}
        return get_val_dataset(
            self.path,
            split_part="val",
            batch_size=self.micro_batch_size,
            task_encoder=encoder,
            worker_config=worker_config,
            packing_buffer_size=self.packing_buffer_size,
            **dataset_kwargs,
        )

    def _check_packing(self, encoder: Any) -> None:
        """A packing buffer needs an encoder that packs; say so instead of Energon's assert."""
        if self.packing_buffer_size is None:
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
                f"packing_buffer_size={self.packing_buffer_size} needs a task encoder that packs, "
                f"but {type(encoder).__name__} does not implement {' and '.join(missing)}; "
                "select a packing strategy the encoder supports, or set packing_buffer_size=None"
            )

    def build(self) -> tuple[Any, Any]:
        """Build (or return the cached) training loader and a validation loader."""
        return self.train_dataloader(), self.val_dataloader()

    def _loader_dataset(self, num_workers: int, split: Literal["train", "val"]) -> Any:
        """The Energon dataset of ``split`` under the bad-sample policy, with skip counting.

        The policy is the task encoder's ``on_error`` (``"skip"`` if it has none); it applies
        to Energon's decoding errors and to truncated shards too.
        """
        from energon_plugins.loading.errors_policy import (
            SkipCountingDataset,
            SkipTracker,
            guard_truncated_shards,
        )

        encoder = self.task_encoder if split == "train" else self.validation_task_encoder
        if self.packing_buffer_size is not None:
            # Packed batches carry megatron-core's PackedSeqParams: unpickling them from a
            # worker would import megatron-core here, with its warnings. Import it quietly now.
            import_quietly("megatron.core.packed_seq_params")
        tracker = SkipTracker(getattr(encoder, "on_error", "skip"))
        worker_config = self._build_worker_config(num_workers, split=split, error_handler=tracker)
        dataset = self.datasets_provider(worker_config, split=split)
        guard_truncated_shards(dataset, tracker)
        dataset = self._formatted(dataset, split, encoder)
        return SkipCountingDataset(dataset, tracker, encoder)

    def _formatted(self, dataset: Any, split: Literal["train", "val"], encoder: Any) -> Any:
        """``dataset`` with :attr:`batch_format` applied to every batch (in the workers)."""
        from energon_plugins.loading.formatting import BatchFormatDataset, build_batch_format

        fmt, label = build_batch_format(self.batch_format, self.build_context(split))
        if fmt is None:
            return dataset
        return BatchFormatDataset(dataset, fmt, label=label, encoder=encoder)

    def _pinned(self, loader: Any) -> Any:
        from energon_plugins.loading.transfer import configure_pinning

        configure_pinning(loader, self.pin_memory)
        return loader

    def train_dataloader(self) -> EnergonDataloader:
        """The training loader (Energon's savable loader), built once and cached."""
        if self.train_dataloader_object is None:
            from megatron.energon import get_savable_loader

            dataset = self._loader_dataset(self.num_workers, "train")
            loader = self._pinned(get_savable_loader(dataset))
            self.train_dataloader_object = EnergonDataloader(loader, device=self.device)
        return self.train_dataloader_object

    def val_dataloader(self) -> Any:
        """The validation loader.

        ``validation_mode="finite"``: a fresh :class:`FiniteDataloader` on every call, yielding
        every val sample once in the same order per pass (``len()`` batches; ``next()`` past
        the end raises ``StopIteration`` once, then starts the same pass again).
        ``"infinite"``: a cached, cycling :class:`EnergonDataloader` over the shuffled val
        split (Megatron-Bridge's behaviour).
        """
        from megatron.energon import get_loader, get_savable_loader

        if self.validation_mode == "infinite":
            if self.val_dataloader_object is None:
                dataset = self._loader_dataset(self.num_val_workers, "val")
                self.val_dataloader_object = EnergonDataloader(
                    self._pinned(get_savable_loader(dataset))
                )
            return self.val_dataloader_object
        dataset = self._loader_dataset(self.num_val_workers, "val")
        self.val_dataloader_object = FiniteDataloader(self._pinned(get_loader(dataset)))
        return self.val_dataloader_object

    def test_dataloader(self) -> None:
        """Return ``None``: this module has no test split (a warning says so)."""
        warnings.warn(
            "EnergonMultiModalDataModule has no test split; test_dataloader() returns None",
            UserWarning,
            stacklevel=2,
        )
        return None

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """The training loader's state (``{"dataloader_state": ...}``), for checkpoints."""
        if self.train_dataloader_object is None:
            return {}
        return {"dataloader_state": self.train_dataloader_object.save_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the training loader from :meth:`state_dict` (before iterating it)."""
        if "dataloader_state" in state:
            self.train_dataloader().restore_state(state["dataloader_state"])

    def save_checkpoint(self, folder: Any) -> Any:
        """Write this DP rank's loader state to ``folder/train_dataloader_dprank{NNN}.pt``.

        The file carries a fingerprint of the setup (world size, DP rank, dataset, task
        encoder and options, batch, worker and packing settings); returns its path.
        """
        from energon_plugins.loading.checkpoint import save_datamodule_state

        return save_datamodule_state(self, folder)

    def load_checkpoint(self, folder: Any) -> None:
        """Restore this DP rank's loader state from ``folder`` (before the first batch).

        Raises:
            StateMismatchError: the state was saved by a different setup; names what differs.
        """
        from energon_plugins.loading.checkpoint import load_datamodule_state

        load_datamodule_state(self, folder)

    def skip_counts(self) -> dict[str, int]:
        """Training samples skipped so far by reason (corrupt image, json, missing field,
        truncated shard, encoder failures), summed over this rank's workers."""
        if self.train_dataloader_object is None:
            return {}
        return self.train_dataloader_object.skip_counts()

    def __repr__(self) -> str:
        return (
            f"EnergonMultiModalDataModule(path={self.path!r}, seq_length={self.seq_length}, "
            f"micro_batch_size={self.micro_batch_size}, num_workers={self.num_workers})"
        )
