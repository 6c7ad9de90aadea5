"""``EnergonMultiModalDataModule``: the seed datamodule, on Megatron-Energon's real loaders.

A facade over one module per job: argument checks (:mod:`~energon_plugins.loading.arguments`),
components (:mod:`~energon_plugins.loading.encoders`, built on first use from the final
attribute values), Energon set-up (:mod:`~energon_plugins.loading.assembly`,
:mod:`~energon_plugins.loading.validation_loader`) and :mod:`~energon_plugins.loading.checkpoint`.
"""

import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from megatron.energon import WorkerConfig

from energon_plugins.config.blend_plan import schedule_stages
from energon_plugins.config.settings import CHECKPOINT_EVERY_MIN_N_SAMPLES, CHECKPOINT_EVERY_SEC
from energon_plugins.host.context import BuildContext
from energon_plugins.host.defaults import DEFAULT_BATCH_FORMAT
from energon_plugins.loading import checkpoint, encoders, per_source_validation
from energon_plugins.loading.arguments import check_arguments
from energon_plugins.loading.assembly import build_worker_config, split_dataset
from energon_plugins.loading.build import datamodule_keywords
from energon_plugins.loading.dataloader import EnergonDataloader
from energon_plugins.loading.distributed import ParallelLayout, parallel_layout
from energon_plugins.loading.formatting import check_batch_format_arg
from energon_plugins.loading.model_processor import resolve_image_processor
from energon_plugins.loading.training import training_loader
from energon_plugins.loading.validation_loader import build_validation_loader


class EnergonMultiModalDataModule:
    """A DataModule for multimodal (image and text) Energon datasets.

    Args:
        path: an Energon dataset folder (prepared, with ``.nv-meta/``), a metadataset YAML,
            a ``.jsonl`` file, or a remote path Energon opens (``msc://profile/path``; checked
            now over the storage client: the profile, the bucket, the credentials, ``.nv-meta``).
        tokenizer: a Hugging Face tokenizer (with a chat template and the image token).
        image_processor: called as ``proc(images=[...], return_tensors="pt")``; a raw
            transformers image processor is wrapped so it gets 8-bit images. Optional: only an
            encoder that processes images itself needs one (the built-in ``multimodal`` does;
            an encoder object brings its own). ``None`` with a tokenizer loaded from a model
            directory that holds ``preprocessor_config.json``: the built-in ``hf`` processor of
            that directory, as ``AutoProcessor`` would (never with remote code).
        seq_length: maximum tokens per sample (and padded batch width).
        micro_batch_size: samples per batch, for training and validation.
        global_batch_size: kept for the training loop; a multiple of ``micro_batch_size`` x the
            data-parallel size (default: exactly that product).
        num_workers: loader worker processes for training (0: load in this process).
        num_val_workers: worker processes for validation (default: ``num_workers``).
        pin_memory: pin batches in page-locked host memory (only where CUDA is available;
            Energon 7.4 hard-codes ``True``, this setting overrides it before iteration).
        shuffle_buffer_size: size of Energon's sample shuffle buffer (training).
        max_samples_per_sequence: samples read in a row from one shard slice.
        multimodal_sample_config: a :class:`MultiModalSampleConfig` or a mapping (default one
            if None).
        task_encoder: an Energon ``TaskEncoder``, a registered name, ``{name, options}``, or
            ``None`` for the built-in ``multimodal`` encoder.
        decoder_seq_length: for encoder-decoder models.
        packing_buffer_size: Energon's packing buffer size (None: no packing).
        validation_task_encoder: as ``task_encoder``, for validation (default: the training
            encoder, or, for a named one, the same plugin built with ``split="val"``).
        pg_collection: a megatron-core ``ProcessGroupCollection`` (or anything whose ``dp``,
            and optionally ``cp`` / ``tp``, answer ``rank()`` and ``size()``): the pure ``dp``
            group gives the data-parallel rank and size; ``cp`` / ``tp`` sizes reach the
            packing stage through the build context.
        validation_mode: ``"finite"`` (default: every val sample once per pass, in order, the
            same batches at every evaluation, equal length on every DP rank; see
            :class:`~energon_plugins.loading.validation.ValidationLoader`) or ``"infinite"``
            (Megatron-Bridge's old behaviour: a shuffled, repeating val split).
        packing: the packing strategy: a registered name (``"first-fit-decreasing"``, an
            alias such as ``"ffd"``), ``{name, options}``, or a strategy object
            (``select(lengths, capacity)``). Needs ``packing_buffer_size``.
        device: copy every training batch to this device one batch ahead, on a side CUDA
            stream (``None``: leave batches on the host; without CUDA a quiet no-op).
        batch_format: what the training loop reads: a registered batch format's name,
            ``{name, options}``, a callable ``fmt(batch)``, or ``None`` for the task encoder's
            batch as it is. Default: the built-in ``megatron-bridge`` (Megatron-Bridge's
            ``vlm_step``); ``megatron-lm`` and ``hf`` are built in too. It runs in the loader
            workers, after the task encoder's ``encode_batch``.
        sequence_parallel: whether the model uses sequence parallelism (packing then pads for
            context x tensor parallel sharding); ``None`` (unknown) pads as if it did, which is
            valid either way.
        val_batches_per_evaluation: batches per evaluation (Megatron's ``eval_iters``);
            default: one pass.
        checkpoint_every_sec, checkpoint_every_min_n_samples, n_checkpoints: passed to
            Energon's ``get_savable_loader`` (how often workers take the internal checkpoints
            a restore replays from). Default: a checkpoint per batch (0 s, 1 batch), so a
            restore takes about as long as a fresh start; ``checkpoint_every_min_n_samples=None``
            is Energon's own default (2 x ``num_workers``).
        seed: the data-order seed (Energon's ``WorkerConfig.seed_offset``), recorded in saved
            states: another seed shuffles differently, the same seed repeats the order.
        data_partitions: the fixed number of data partitions of the training stream; a resume
            on another number of ranks or workers (``restore_state`` with every old rank's
            state) may use up to that many workers in all. Default: data-parallel size x
            ``max(num_workers, 1)`` (each worker one partition: today's order). See the
            "Changing the number of GPUs" guide for what more partitions cost.
        cache_pool: a local cache for media read from a metadataset's aux sources:
            ``{path: DIR, max_size_gb: N}`` (Energon's ``FileStoreCachePool``, the cap shared by
            all loader processes; see :mod:`~energon_plugins.loading.cache_pool`), an Energon
            ``CachePool`` object used as it is, or ``None`` (no cache).
        blend_schedule: weights of the training blend that change as the run goes: stages
            ``[{"at": SAMPLES, "weights": {ENTRY: W}}]`` (``at`` counts the samples of the
            whole run, increasing; every top-level blend entry named by its path as the YAML
            writes it); before the first stage the metadataset's weights. Restored exactly
            with the loader state. See :mod:`~energon_plugins.loading.blend_schedule`.
        **kwargs: extra arguments of Energon's ``get_train_dataset`` (and, where they describe
            the dataset, ``get_val_dataset``): see
            :data:`~energon_plugins.config.energon_arguments.ENERGON_DATASET_ARGUMENTS`.
            Anything else is refused here, by name.

    Raises:
        ConfigError: any argument is invalid (one message naming every bad field).
        DatasetError: the dataset path (local or ``msc://``) is not an Energon dataset with a
            train split, or a remote one cannot be read (the URL and the profile named).
        PluginNotFoundError, PluginOptionsError: a named plugin is unknown or its options bad.
    """

    def __init__(
        self,
        path: "str | os.PathLike[str]",
        tokenizer: Any,
        image_processor: Any = None,
        seq_length: int = 2048,
        micro_batch_size: int = 1,
        global_batch_size: int | None = None,
        num_workers: int = 1,
        num_val_workers: int | None = None,
        pin_memory: bool = True,
        shuffle_buffer_size: int | None = 100,
        max_samples_per_sequence: int | None = None,
        multimodal_sample_config: Any = None,
        task_encoder: Any = None,
        decoder_seq_length: int | None = None,
        packing_buffer_size: int | None = None,
        validation_task_encoder: Any = None,
        pg_collection: Any = None,
        *,
        validation_mode: Literal["finite", "infinite"] = "finite",
        packing: Any = None,
        device: Any = None,
        sequence_parallel: bool | None = None,
        val_batches_per_evaluation: int | None = None,
        checkpoint_every_sec: float = CHECKPOINT_EVERY_SEC,
        checkpoint_every_min_n_samples: int | None = CHECKPOINT_EVERY_MIN_N_SAMPLES,
        n_checkpoints: int | None = None,
        batch_format: Any = DEFAULT_BATCH_FORMAT,
        seed: int = 0,
        data_partitions: int | None = None,
        cache_pool: Any = None,
        blend_schedule: Any = None,
        **kwargs: Any,
    ) -> None:
        sample_config, layout = check_arguments(locals(), keywords=_KEYWORDS)
        self.path = str(path)
        self.tokenizer = tokenizer
        #: Where :attr:`image_processor` came from: ``"given"``, ``"hf from DIR"`` (the
        #: tokenizer's model directory, see :mod:`~energon_plugins.loading.model_processor`),
        #: or ``None`` (none: an encoder that brings its own builds it).
        self.image_processor, self.image_processor_source = resolve_image_processor(
            image_processor, tokenizer
        )
        self.seq_length = int(seq_length)
        self.micro_batch_size = int(micro_batch_size)
        default_global_batch = self.micro_batch_size * layout.dp_size
        self.global_batch_size = default_global_batch if global_batch_size is None else int(global_batch_size)
        self.num_workers = int(num_workers)
        self.num_val_workers = self.num_workers if num_val_workers is None else int(num_val_workers)
        self.pin_memory = pin_memory
        self.shuffle_buffer_size = shuffle_buffer_size
        self.max_samples_per_sequence = max_samples_per_sequence
        self.multimodal_sample_config = sample_config
        self.decoder_seq_length = decoder_seq_length
        self.packing_buffer_size = packing_buffer_size
        self.pg_collection = pg_collection
        self.validation_mode = validation_mode
        self.device = device
        self.sequence_parallel = sequence_parallel
        self.val_batches_per_evaluation = val_batches_per_evaluation
        self.checkpoint_every_sec = float(checkpoint_every_sec)
        self.checkpoint_every_min_n_samples = checkpoint_every_min_n_samples
        self.n_checkpoints = n_checkpoints
        self.seed = int(seed)
        self.data_partitions = None if data_partitions is None else int(data_partitions)
        self.cache_pool = cache_pool
        #: The training blend's weight stages, ``(at, {entry: weight})`` (``()``: fixed weights).
        self.blend_schedule = schedule_stages(self.path, blend_schedule)
        self.kwargs = kwargs
        self.init_global_step = 0
        self.packing = None  # build_context() reads it while the strategy is built
        self.packing = encoders.resolve_packing(packing, self.build_context)
        self.task_encoder = task_encoder  # a name is checked now; the encoder built on first use
        self.validation_task_encoder = validation_task_encoder
        check_batch_format_arg(batch_format)
        self.batch_format = batch_format
        self.train_dataloader_object: EnergonDataloader | None = None
        self.val_dataloader_object: Any = None
        self.val_dataloaders_object: dict[str, Any] | None = None

    @classmethod
    def from_config(cls, config_or_path: Any, **overrides: Any) -> "EnergonMultiModalDataModule":
        """Build a datamodule from a config file, mapping or model, with overrides applied
        (see :func:`~energon_plugins.loading.build.datamodule_keywords`; all checked first)."""
        return cls(**datamodule_keywords(config_or_path, **overrides))

    def parallel_layout(self) -> ParallelLayout:
        """This rank's data-parallel rank and size, and the CP / TP sizes (from
        ``pg_collection``, else ``torch.distributed``, else a single rank)."""
        return parallel_layout(self.pg_collection)

    def build_context(self, split: Literal["train", "val"] = "train") -> BuildContext:
        """The :class:`BuildContext` handed to component factories, from current values."""
        return encoders.datamodule_context(self, split)

    task_encoder = encoders.TaskEncoderAttribute("train")
    """The training task encoder (built on first access; set a name, options or an object)."""
    validation_task_encoder = encoders.TaskEncoderAttribute("val")
    """The validation task encoder (built on first access; default: as the training one)."""

    # ------------------------------------------------------------------ Energon loaders
    def _build_worker_config(
        self, num_workers: int, split: str = "train", *, error_handler: Any = None
    ) -> WorkerConfig:
        """Build a ``WorkerConfig`` from ``pg_collection``'s pure DP group, else
        ``default_worker_config`` (see :func:`~energon_plugins.loading.assembly.build_worker_config`)."""
        return build_worker_config(
            num_workers, split, self.pg_collection, error_handler=error_handler, seed=getattr(self, "seed", 0)
        )

    def datasets_provider(self, worker_config: Any, split: Literal["train", "val"] = "val") -> Any:
        """Return the Energon dataset of ``split`` (``"train"`` or ``"val"``).

        Raises:
            ValueError, DatasetError, ConfigError: see
                :func:`~energon_plugins.loading.assembly.split_dataset`.
        """
        return split_dataset(self, worker_config, split)

    def build(self) -> tuple[Any, Any]:
        """Build (or return the cached) training loader and validation loader."""
        return self.train_dataloader(), self.val_dataloader()

    def train_dataloader(self) -> EnergonDataloader:
        """The training loader (Energon's savable loader, cycling), built once and cached."""
        if self.train_dataloader_object is None:
            self.train_dataloader_object = training_loader(self)
        return self.train_dataloader_object

    def val_dataloader(self) -> Any:
        """The validation loader of ``validation_mode``, built once and cached (see
        :mod:`~energon_plugins.loading.validation_loader`)."""
        if self.val_dataloader_object is None:
            self.val_dataloader_object = build_validation_loader(self)
        return self.val_dataloader_object

    def val_dataloaders(self) -> dict[str, Any]:
        """One finite validation loader per source of the val split, ``{source: loader}``, in
        the order of the metadataset YAML, built once and cached.

        A source is named as in ``stats()`` and ``__sources__``: the leaf's ``path`` as the YAML
        writes it (a single dataset: ``{path: loader}``). Each loader has ``val_dataloader()``'s
        guarantees over its source alone (each sample once per pass, the same batches every
        evaluation, the same ``len()`` on every DP rank); take ``len()`` on every rank in the
        same order. See :mod:`~energon_plugins.loading.per_source_validation`.

        Raises:
            ConfigError: ``validation_mode`` is not ``"finite"``, or a dataset is listed twice
                in the val split.
        """
        if self.val_dataloaders_object is None:
            self.val_dataloaders_object = per_source_validation.val_dataloaders(self)
        return self.val_dataloaders_object

    def close(self) -> None:
        """Stop the loaders' worker processes and drop the loaders (rebuilt on next use)."""
        for loader in (self.val_dataloaders_object or {}).values():
            loader.close()
        self.val_dataloaders_object = None
        for name in ("train_dataloader_object", "val_dataloader_object"):
            loader = getattr(self, name)
            if loader is not None and hasattr(loader, "close"):
                loader.close()
            setattr(self, name, None)

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
        """The training loader's state (``{"dataloader_state": ...}``, with the setup's
        fingerprint: :meth:`load_state_dict` refuses another setup's state, naming what differs)."""
        return checkpoint.datamodule_state_dict(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the training loader from :meth:`state_dict` (before iterating it)."""
        checkpoint.load_datamodule_state_dict(self, state)

    def save_checkpoint(self, folder: Any) -> Any:
        """Write this DP rank's loader state, with the setup's fingerprint, to
        ``folder/train_dataloader_dprank{NNN}.pt``; return its path."""
        return checkpoint.save_datamodule_state(self, folder)

    def load_checkpoint(self, folder: Any) -> None:
        """Restore this DP rank's loader state from ``folder`` (before the first batch): a file
        of :meth:`save_checkpoint` or Megatron-Bridge's, read with a restricted unpickler.

        Raises:
            StateMismatchError: the state was saved by a different setup; names what differs.
            StateFileError: the file is truncated, corrupt or not a loader state.
        """
        checkpoint.load_datamodule_state(self, folder)

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


_KEYWORDS = tuple(
    name
    for name, parameter in inspect.signature(EnergonMultiModalDataModule.__init__).parameters.items()
    if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD
)
"""The constructor's own keywords (suggested for a misspelt extra keyword)."""


def build_datamodule(config_or_path: Any, **overrides: Any) -> EnergonMultiModalDataModule:
    """Build an :class:`EnergonMultiModalDataModule` from a config file, mapping or
    :class:`~energon_plugins.config.DataModuleConfig`, with overrides applied (the same as
    :meth:`EnergonMultiModalDataModule.from_config`)."""
    return EnergonMultiModalDataModule.from_config(config_or_path, **overrides)
