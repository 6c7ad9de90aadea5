"""``EnergonMultiModalDataModule``: the seed datamodule, on Megatron-Energon's real loaders.

The constructor is light: it validates every argument with the same rules as the config file
(:mod:`energon_plugins.config.settings`, :mod:`energon_plugins.config.energon_arguments`;
one :class:`~energon_plugins.ConfigError` naming every bad field), checks a local dataset path
(a remote ``msc://`` path is left to Energon), resolves named plugins, and stores everything.
Task encoders are built on first use from the final attribute values; loaders are built once,
by :meth:`train_dataloader` / :meth:`val_dataloader`.

It accepts the calls both the seed API and Megatron-Bridge's current builder make
(``image_processor`` and ``global_batch_size`` optional, ``pg_collection`` read through
``dp.rank()`` / ``dp.size()``). :meth:`from_config` (and :func:`build_datamodule`) read a
config through :func:`energon_plugins.loading.build.datamodule_keywords`.
"""

import inspect
import logging
import os
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from energon_plugins._quiet import import_quietly
from energon_plugins.config.dataset_check import (
    check_dataset,
    energon_dataset_errors,
    is_remote,
)
from energon_plugins.config.dataset_fit import check_fit
from energon_plugins.config.energon_arguments import (
    energon_argument_issues,
    split_energon_arguments,
)
from energon_plugins.config.settings import (
    CHECKPOINT_EVERY_MIN_N_SAMPLES,
    CHECKPOINT_EVERY_SEC,
    SETTING_NAMES,
    ConfigIssue,
    cross_field_issues,
    raise_issues,
    settings_issues,
)
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.errors import ConfigError, DatasetError
from energon_plugins.host.context import BuildContext
from energon_plugins.host.defaults import DEFAULT_BATCH_FORMAT, DEFAULT_TASK_ENCODER
from energon_plugins.loading.dataloader import EnergonDataloader
from energon_plugins.loading.distributed import ParallelLayout, max_over_group, parallel_layout
from energon_plugins.loading.heap import freezes_heap
from energon_plugins.loading.model_processor import resolve_image_processor
from energon_plugins.loading.validation import ValidationLoader

logger = logging.getLogger(__name__)

SPLITS = ("train", "val")
VALIDATION_MODES = ("finite", "infinite")


def _encoder_selection(name: str, value: Any) -> tuple[str, Any] | None:
    """``(plugin name, options)`` when ``value`` selects an encoder by name, else ``None``."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, Mapping):
        unknown = set(value) - {"name", "options"}
        if unknown or "name" not in value:
            raise ConfigError(f"{name}: expected {{name, options}}, got keys {sorted(map(str, value))}")
        return str(value["name"]), value.get("options")
    return None


class EnergonMultiModalDataModule:
    """A DataModule for multimodal (image and text) Energon datasets.

    Args:
        path: an Energon dataset folder (prepared, with ``.nv-meta/``), a metadataset YAML,
            a ``.jsonl`` file, or a remote path Energon opens (``msc://profile/path``; checked
            when the first loader is built).
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
        **kwargs: extra arguments of Energon's ``get_train_dataset`` (and, where they describe
            the dataset, ``get_val_dataset``): see
            :data:`~energon_plugins.config.energon_arguments.ENERGON_DATASET_ARGUMENTS`.
            Anything else is refused here, by name.

    Raises:
        ConfigError: any argument is invalid (one message naming every bad field).
        DatasetError: a local dataset path is not an Energon dataset with a train split.
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
        **kwargs: Any,
    ) -> None:
        arguments = locals()
        settings = {name: arguments[name] for name in SETTING_NAMES}
        issues = settings_issues(settings)
        if validation_mode not in VALIDATION_MODES:
            issues.append(
                ConfigIssue("validation_mode", f"must be 'finite' or 'infinite', got {validation_mode!r}")
            )
        issues += energon_argument_issues(kwargs, other_names=_KEYWORDS)
        if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
            issues.append(ConfigIssue("path", f"expected a dataset path, got {path!r:.60}"))
        sample_config, problem = _sample_config(multimodal_sample_config)
        if problem is not None:
            issues.append(problem)
        for problem in (_image_processor_problem(image_processor), _packing_problem(packing)):
            if problem is not None:
                issues.append(problem)
        layout = parallel_layout(pg_collection)
        named_encoder = task_encoder is None or _encoder_selection("task_encoder", task_encoder)
        if not issues:  # cross-field rules need well-typed values
            issues += cross_field_issues(
                settings,
                dp_size=layout.dp_size,
                packing=packing is not None,
                named_encoder=bool(named_encoder),
            )
        raise_issues(issues)
        if not is_remote(path):
            check_dataset(path, ("train",))

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
        self.global_batch_size = (
            int(global_batch_size)
            if global_batch_size is not None
            else self.micro_batch_size * layout.dp_size
        )
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
        self.kwargs = kwargs
        self.init_global_step = 0
        self.packing = None  # build_context() reads it while the strategy is built
        self.packing = self._resolve_packing(packing)

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

        See :func:`energon_plugins.loading.build.datamodule_keywords` for the overrides and
        the errors; every value is validated before anything is built.
        """
        from energon_plugins.loading.build import datamodule_keywords

        return cls(**datamodule_keywords(config_or_path, **overrides))

    @staticmethod
    def _validate_selection(name: str, options: Any) -> None:
        from energon_plugins.host.manager import get_registry

        spec = get_registry().resolve("task_encoder", name)
        spec.validate_options(options)

    def _resolve_packing(self, packing: Any) -> Any:
        """A packing strategy object from a name, ``{name, options}`` or an object."""
        if packing is None or not isinstance(packing, (str, Mapping)):
            return packing
        from energon_plugins.host.api import create

        if isinstance(packing, str):
            name, options = packing, None
        else:
            unknown = set(packing) - {"name", "options"}
            if unknown or "name" not in packing:
                raise ConfigError(
                    f"packing: expected {{name, options}}, got keys {sorted(map(str, packing))}"
                )
            name, options = str(packing["name"]), packing.get("options")
        return create("packing_strategy", name, options, self.build_context("train"))

    def parallel_layout(self) -> ParallelLayout:
        """This rank's data-parallel rank and size, and the CP / TP sizes (from
        ``pg_collection``, else ``torch.distributed``, else a single rank)."""
        return parallel_layout(self.pg_collection)

    def build_context(self, split: Literal["train", "val"] = "train") -> BuildContext:
        """The :class:`BuildContext` handed to component factories, from current values."""
        layout = self.parallel_layout()
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
            cp_size=layout.cp_size,
            tp_size=layout.tp_size,
            sequence_parallel=self.sequence_parallel,
        )

    def _build_encoder(self, arg: Any, split: Literal["train", "val"]) -> Any:
        from energon_plugins.host.api import create

        selection = _encoder_selection("task_encoder" if split == "train" else "validation_task_encoder", arg)
        if arg is None:
            selection = (DEFAULT_TASK_ENCODER, None)
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
        from megatron.energon import WorkerConfig

        raise_issues(settings_issues({"num_workers": num_workers}))
        layout = self.parallel_layout()
        dp = getattr(self.pg_collection, "dp", None) if self.pg_collection is not None else None
        if dp is None:
            return WorkerConfig.default_worker_config(num_workers)
        logger.debug("%s worker config: dp rank %d of %d", split, layout.dp_rank, layout.dp_size)
        return WorkerConfig(
            rank=layout.dp_rank,
            world_size=layout.dp_size,
            num_workers=num_workers,
            data_parallel_group=layout.dp_group,
        )

    def datasets_provider(self, worker_config: Any, split: Literal["train", "val"] = "val") -> Any:
        """Return the Energon dataset of ``split`` (``"train"`` or ``"val"``).

        Training (and ``validation_mode="infinite"``) uses ``get_train_dataset`` with every
        extra argument; the finite validation split uses ``get_val_dataset`` with those that
        describe the dataset (see :func:`~energon_plugins.config.energon_arguments.split_energon_arguments`).

        Raises:
            ValueError: ``split`` is neither ``"train"`` nor ``"val"``.
            DatasetError: the dataset has no such split, the encoder cannot read it, Energon
                cannot parse its description, or a remote dataset cannot be opened.
        """
        if split not in SPLITS:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        if not is_remote(self.path):
            check_dataset(self.path, (split,))
        encoder = self.task_encoder if split == "train" else self.validation_task_encoder
        check_fit(encoder, self.path, split)
        self._check_packing(encoder)
        with energon_dataset_errors(self.path):
            return self._energon_dataset(worker_config, split, encoder)

    def _energon_dataset(self, worker_config: Any, split: str, encoder: Any) -> Any:
        from megatron.energon import get_train_dataset, get_val_dataset

        try:
            if split == "train" or self.validation_mode == "infinite":
                # Training, or Megatron-Bridge's old validation: shuffled and repeating.
                return get_train_dataset(
                    self.path,
                    split_part=split,
                    batch_size=self.micro_batch_size,
                    task_encoder=encoder,
                    worker_config=worker_config,
                    packing_buffer_size=self.packing_buffer_size,
                    max_samples_per_sequence=self.max_samples_per_sequence,
                    shuffle_buffer_size=self.shuffle_buffer_size,
                    **split_energon_arguments(self.kwargs, "train"),
                )
            return get_val_dataset(
                self.path,
                split_part="val",
                batch_size=self.micro_batch_size,
                task_encoder=encoder,
                worker_config=worker_config,
                packing_buffer_size=self.packing_buffer_size,
                **split_energon_arguments(self.kwargs, "val"),
            )
        except (OSError, KeyError, ValueError, AssertionError) as exc:
            if not is_remote(self.path) or isinstance(exc, DatasetError):
                raise
            text = " ".join(str(exc).split())[:300]
            raise DatasetError(
                f"{self.path}: cannot open the {split!r} split of this remote dataset "
                f"({type(exc).__name__}: {text})"
            ) from exc

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
        """Build (or return the cached) training loader and validation loader."""
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

    def _savable_loader(self, dataset: Any, *, training: bool = True) -> Any:
        from megatron.energon import SavableDataLoader

        from energon_plugins.loading.stages import finish_watchdogs

        return self._pinned(
            finish_watchdogs(
                SavableDataLoader(
                    dataset,
                    checkpoint_every_sec=self.checkpoint_every_sec,
                    checkpoint_every_min_n_samples=self.checkpoint_every_min_n_samples,
                    n_checkpoints=self.n_checkpoints,
                    gc_freeze_at_start=freezes_heap(dataset, training=training),
                )
            )
        )

    def train_dataloader(self) -> EnergonDataloader:
        """The training loader (Energon's savable loader, cycling), built once and cached."""
        if self.train_dataloader_object is None:
            from energon_plugins.loading.checkpoint import loader_fingerprint

            loader = self._savable_loader(self._loader_dataset(self.num_workers, "train"))
            config = loader.worker_config
            fingerprint = loader_fingerprint(self, dp_rank=config.rank, dp_world_size=config.world_size)
            self.train_dataloader_object = EnergonDataloader(
                loader, device=self.device, fingerprint=fingerprint
            )
        return self.train_dataloader_object

    def val_dataloader(self) -> Any:
        """The validation loader, built once and cached.

        ``validation_mode="finite"`` (default): a
        :class:`~energon_plugins.loading.validation.ValidationLoader`. ``iter()`` on it never
        runs dry and replays the same evaluation again and again (what Megatron's loops
        need: ``iter(val_dataloader())`` once, then ``next()`` ``eval_iters`` times per
        evaluation); ``len()`` is the batches of one evaluation, equal on every DP rank (a
        rank with fewer real batches pads with zero-loss batches); ``one_pass()`` yields one
        evaluation and stops (for hand-written loops). ``"infinite"``: a cycling
        :class:`EnergonDataloader` over the shuffled val split (Megatron-Bridge's old
        behaviour).
        """
        if self.val_dataloader_object is None:
            if self.validation_mode == "infinite":
                dataset = self._loader_dataset(self.num_val_workers, "val")
                self.val_dataloader_object = EnergonDataloader(self._savable_loader(dataset, training=False))
            else:
                self.val_dataloader_object = self._validation_loader()
        return self.val_dataloader_object

    def _validation_loader(self) -> ValidationLoader:
        from functools import partial

        from energon_plugins.loading.validation import RestartingDataset

        encoder = self.validation_task_encoder
        dataset = RestartingDataset(self._loader_dataset(self.num_val_workers, "val"))
        loader = self._pinned(_evaluation_loader(dataset))
        overridden = getattr(encoder, "_is_overridden", None)
        grouped = overridden is not None and overridden(encoder.batch_group_criterion)
        # Plain batching: Energon's len() bounds the pass (exact unless samples are skipped);
        # packed or grouped batches are counted by reading one pass.
        count_by_pass = self.packing_buffer_size is not None or grouped
        template = partial(
            _first_val_batch,
            self.path,
            encoder,
            self.micro_batch_size,
            self.packing_buffer_size,
            split_energon_arguments(self.kwargs, "val"),
            self.pin_memory,
        )
        return ValidationLoader(
            loader,
            pass_length=partial(max_over_group, layout=self.parallel_layout(), what="len(val_dataloader())"),
            count_by_pass=count_by_pass,
            batches_per_evaluation=self.val_batches_per_evaluation,
            template=template,
            ignore_index=int(getattr(self.multimodal_sample_config, "ignore_index", -100)),
        )

    def close(self) -> None:
        """Stop the loaders' worker processes and drop the loaders (rebuilt on next use)."""
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
        """The training loader's state (``{"dataloader_state": ...}``), for checkpoints.

        The state carries the setup's fingerprint, so :meth:`load_state_dict` refuses a state
        from another setup with the differences named (as :meth:`load_checkpoint` does).
        """
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

        Reads files written by :meth:`save_checkpoint` or by Megatron-Bridge's checkpointing,
        with a restricted unpickler.

        Raises:
            StateMismatchError: the state was saved by a different setup; names what differs.
            StateFileError: the file is truncated, corrupt or not a loader state.
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


# ---------------------------------------------------------------------- argument helpers
_KEYWORDS = tuple(
    name
    for name, parameter in inspect.signature(EnergonMultiModalDataModule.__init__).parameters.items()
    if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD
)
"""The constructor's own keywords (suggested for a misspelt extra keyword)."""


def _sample_config(value: Any) -> tuple[MultiModalSampleConfig, ConfigIssue | None]:
    """The sample config from ``None``, a mapping or an instance (or the default and an issue)."""
    if value is None:
        return MultiModalSampleConfig(), None
    if isinstance(value, MultiModalSampleConfig):
        return value, None
    if isinstance(value, Mapping):
        import pydantic

        try:
            return MultiModalSampleConfig.model_validate(dict(value)), None
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()
            )
            return MultiModalSampleConfig(), ConfigIssue("multimodal_sample_config", problems)
    return MultiModalSampleConfig(), ConfigIssue(
        "multimodal_sample_config",
        f"must be a MultiModalSampleConfig or a mapping, got {type(value).__name__}",
    )


def _image_processor_problem(value: Any) -> ConfigIssue | None:
    if value is None or callable(value):
        return None
    hint = ""
    if isinstance(value, int) and not isinstance(value, bool):
        hint = (
            " (an integer here is usually seq_length passed positionally in Megatron-Bridge's "
            "order, which has no image_processor: pass the arguments by keyword)"
        )
    return ConfigIssue(
        "image_processor",
        "must be callable as proc(images=[...], return_tensors='pt') or None, got "
        f"{type(value).__name__}{hint}",
    )


def _packing_problem(value: Any) -> ConfigIssue | None:
    if value is None or isinstance(value, (str, Mapping)) or callable(getattr(value, "select", None)):
        return None
    return ConfigIssue(
        "packing",
        "expected a registered packing strategy name (such as 'first-fit-decreasing'), "
        f"{{name, options}}, or an object with select(lengths, capacity); got {type(value).__name__}",
    )


def _evaluation_loader(dataset: Any) -> Any:
    """Energon's basic (not savable) loader for a validation split: no watchdog (Energon 7.4's
    ``WatchdogDataset`` starts a thread per iteration that it never stops, one leaked thread
    per pass), and the heap freeze left to :mod:`energon_plugins.loading.heap`."""
    from megatron.energon.savable_loader import BasicDataLoader

    return BasicDataLoader(
        dataset, watchdog_timeout_seconds=None, gc_freeze_at_start=freezes_heap(dataset, training=False)
    )


def _first_val_batch(
    path: str,
    encoder: Any,
    micro_batch_size: int,
    packing_buffer_size: int | None,
    kwargs: dict[str, Any],
    pin_memory: bool,
) -> Any:
    """The first batch of the validation split read as a single rank (``None`` if empty):
    what a rank without validation samples of its own pads with."""
    from megatron.energon import WorkerConfig, get_val_dataset

    from energon_plugins.loading.transfer import configure_pinning

    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_val_dataset(
        path,
        split_part="val",
        batch_size=micro_batch_size,
        task_encoder=encoder,
        worker_config=config,
        packing_buffer_size=packing_buffer_size,
        **kwargs,
    )
    loader = _evaluation_loader(dataset)
    configure_pinning(loader, pin_memory)
    for batch in loader:
        return batch
    return None


def build_datamodule(config_or_path: Any, **overrides: Any) -> EnergonMultiModalDataModule:
    """Build an :class:`EnergonMultiModalDataModule` from a config file, mapping or
    :class:`~energon_plugins.config.DataModuleConfig`, with overrides applied (the same as
    :meth:`EnergonMultiModalDataModule.from_config`)."""
    return EnergonMultiModalDataModule.from_config(config_or_path, **overrides)
