"""The datamodule's settings and the rules between them: one validation for the constructor and
the config file.

:class:`LoaderSettings` holds every scalar setting of
:class:`~energon_plugins.EnergonMultiModalDataModule` (types, ranges, defaults and
descriptions); the config model (:class:`energon_plugins.config.DataModuleConfig`) inherits it,
so a key validates the same way as a keyword argument. :func:`cross_field_issues` holds the
rules between settings (``global_batch_size`` a multiple of micro batch x DP, packing needs a
buffer and a buffer needs packing). Both paths report :class:`ConfigIssue` objects: the config
lists them all (:class:`~energon_plugins.config.ConfigValidationError`), the constructor raises
one :class:`~energon_plugins.ConfigError` paragraph naming every field (:func:`raise_issues`).

Integers are strict (:mod:`energon_plugins.strict_types`): ``True``, ``2.0`` or ``"8"`` are
refused, not read as 1, 2 or 8 (NumPy integers are accepted). Every count has an upper bound
(``MAX_*`` below) as well as a lower one, so a typo such as ``seq_length: 1e26`` or
``shuffle_buffer_size: 1e18`` (which never yields a batch) is refused by the config and the
constructor alike. Import-light: pydantic only.
"""

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from energon_plugins._suggest import did_you_mean
from energon_plugins.errors import ConfigError
from energon_plugins.strict_types import Boolean, Integer, Number
from energon_plugins.strict_types import short_repr as _short
from energon_plugins.strict_types import strict_integer as _integer


@dataclasses.dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config or call: where (a dotted path such as ``task_encoder.options.x``
    or a keyword name) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


MAX_SEQ_LENGTH = 2**24
"""Longest ``seq_length`` / ``decoder_seq_length`` (16,777,216 tokens): longer than any model's
context; a larger value is a typo (``1e26``) that would only fail when a buffer is allocated."""

MAX_SHUFFLE_BUFFER_SIZE = 2**20
"""Largest ``shuffle_buffer_size`` (1,048,576 samples). Energon fills the buffer before the first
batch, holding every decoded sample: ``1e18`` never yields a batch and grows without bound."""

MAX_PACKING_BUFFER_SIZE = 2**16
"""Largest ``packing_buffer_size`` (65,536 encoded samples, each holding its pixel tensors)."""

MAX_BATCH_SIZE = 2**20
"""Largest ``micro_batch_size`` and ``global_batch_size`` (sequences)."""

MAX_WORKERS = 1024
"""Most loader worker processes per rank (each one is a process of its own)."""

MAX_COUNT = 2**31 - 1
"""Largest value of the other counts (samples per sequence, batches per evaluation, checkpoints)."""
MAX_DATA_PARTITIONS = 65536
"""Most data partitions (each is an Energon pipeline a worker builds and keeps open)."""

MAX_CHECKPOINT_EVERY_SEC = 7 * 24 * 3600.0
"""Longest ``checkpoint_every_sec`` (a week; a restore replays the work since the last one)."""

CHECKPOINT_EVERY_SEC = 0.0
"""Default ``checkpoint_every_sec``: no time floor between a worker's internal checkpoints."""

CHECKPOINT_EVERY_MIN_N_SAMPLES = 1
"""Default ``checkpoint_every_min_n_samples``: a worker checkpoint per batch, so a restore
replays at most one batch per worker (measured in ``benchmarks/throughput/loader.py``: restore as fast as
a fresh start; the checkpoints cost no measurable throughput)."""


class LoaderSettings(BaseModel):
    """Every scalar setting of the datamodule, shared by the constructor and the config file.

    Defaults are the constructor's. ``global_batch_size`` left unset means micro batch x the
    data-parallel size (known only at run time).
    """

    model_config = ConfigDict(extra="forbid")

    seq_length: Integer = Field(
        default=2048, ge=1, le=MAX_SEQ_LENGTH, description="Maximum tokens per sequence."
    )
    micro_batch_size: Integer = Field(
        default=1, ge=1, le=MAX_BATCH_SIZE, description="Sequences per micro batch."
    )
    global_batch_size: Integer | None = Field(
        default=None,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Sequences per global batch, a multiple of micro_batch_size x the "
        "data-parallel size; default: micro_batch_size x the data-parallel size.",
    )
    num_workers: Integer = Field(
        default=1, ge=0, le=MAX_WORKERS, description="Training loader worker processes."
    )
    num_val_workers: Integer | None = Field(
        default=None, ge=0, le=MAX_WORKERS, description="Validation loader workers; default: num_workers."
    )
    pin_memory: Boolean = Field(
        default=True, description="Pin batches in page-locked memory (where CUDA is available)."
    )
    shuffle_buffer_size: Integer | None = Field(
        default=100,
        ge=0,
        le=MAX_SHUFFLE_BUFFER_SIZE,
        description="Samples in the training shuffle buffer (before encoding); the first batch "
        "waits until the buffer is full.",
    )
    max_samples_per_sequence: Integer | None = Field(
        default=None, ge=1, le=MAX_COUNT, description="Samples read per shard sequence; default: whole shard."
    )
    decoder_seq_length: Integer | None = Field(
        default=None,
        ge=1,
        le=MAX_SEQ_LENGTH,
        description="Decoder sequence length of encoder-decoder models.",
    )
    packing_buffer_size: Integer | None = Field(
        default=None,
        ge=1,
        le=MAX_PACKING_BUFFER_SIZE,
        description="Encoded samples the packing strategy chooses from.",
    )
    sequence_parallel: Boolean | None = Field(
        default=None,
        description="The model runs tensor-parallel with sequence parallelism: packed "
        "sequences are padded for context x tensor parallel sharding (Megatron's rule). "
        "Null (unknown) pads as if it did, which is valid either way.",
    )
    val_batches_per_evaluation: Integer | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Batches per evaluation (Megatron's eval_iters): every evaluation starts "
        "the validation split from the beginning and takes this many batches, padded with "
        "zero-loss batches past the end. Default: one whole pass.",
    )
    checkpoint_every_sec: Number = Field(
        default=CHECKPOINT_EVERY_SEC,
        ge=0,
        le=MAX_CHECKPOINT_EVERY_SEC,
        allow_inf_nan=False,
        description="Energon's savable loader: seconds at least between a worker's internal "
        "checkpoints (a restore replays the batches since the last one). Default 0: with "
        "checkpoint_every_min_n_samples 1, a checkpoint per batch, so a restore takes about "
        "as long as a fresh start (Energon's own default, 60 s, replays up to a minute of "
        "work). Only with workers.",
    )
    checkpoint_every_min_n_samples: Integer | None = Field(
        default=CHECKPOINT_EVERY_MIN_N_SAMPLES,
        ge=1,
        le=MAX_COUNT,
        description="Energon's savable loader: at least this many batches of a worker between "
        "its internal checkpoints; null: Energon's default, 2 x num_workers. Only with workers.",
    )
    n_checkpoints: Integer | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="Energon's savable loader: internal checkpoints kept, at least "
        "2 x max(num_workers, 1) + 1; default: exactly that.",
    )
    seed: Integer = Field(
        default=0,
        ge=0,
        le=MAX_COUNT,
        description="The data-order seed (Energon's WorkerConfig.seed_offset): another seed "
        "shuffles differently, the same seed repeats the order. Saved loader states record it.",
    )
    data_partitions: Integer | None = Field(
        default=None,
        ge=1,
        le=MAX_DATA_PARTITIONS,
        description="How many data partitions the training stream is split into, fixed for "
        "the run: a resume may use up to that many workers over all ranks. Default: "
        "data-parallel size x max(num_workers, 1) at the start (today's order); set more at "
        "the start of a run that may grow (each worker then runs several partitions).",
    )


PREFETCH_FACTOR = 2
"""Batches each loader worker prefetches (Energon's ``get_savable_loader`` default)."""

SETTING_NAMES: tuple[str, ...] = tuple(LoaderSettings.model_fields)
"""The names of the shared settings (constructor keywords and config keys alike)."""


def settings_issues(values: Mapping[str, Any], prefix: str = "") -> list[ConfigIssue]:
    """Validate ``values`` (a subset of the settings) and return one issue per bad field."""
    try:
        LoaderSettings.model_validate(dict(values))
    except pydantic.ValidationError as exc:
        return [issue_from_pydantic(error, LoaderSettings, prefix) for error in exc.errors()]
    return []


def cross_field_issues(
    values: Mapping[str, Any],
    *,
    dp_size: int | None = None,
    packing: bool | None = None,
    named_encoder: bool = True,
) -> list[ConfigIssue]:
    """The rules between settings, on raw values (a value of the wrong type is skipped: the
    field check reports it).

    Args:
        values: setting name -> value (missing ones take their defaults).
        dp_size: the data-parallel size, when known (the constructor); the config checks
            ``global_batch_size`` against ``micro_batch_size`` alone.
        packing: whether a packing strategy is selected (``None``: not known).
        named_encoder: whether the task encoder is a registered plugin (it packs only with a
            strategy); an encoder object may pack on its own.
    """
    issues: list[ConfigIssue] = []
    micro = _positive(values.get("micro_batch_size", 1))
    global_ = _positive(values.get("global_batch_size"))
    if micro is not None and global_ is not None:
        unit = micro * (dp_size or 1)
        if global_ % unit:
            what = (
                f"micro_batch_size x data-parallel size ({micro} x {dp_size} = {unit})"
                if dp_size and dp_size > 1
                else f"micro_batch_size ({micro})"
            )
            issues.append(ConfigIssue("global_batch_size", f"{global_} must be a multiple of {what}"))
    kept = _positive(values.get("n_checkpoints"))
    workers = _positive(values.get("num_workers", 1)) or 0
    if kept is not None and kept < PREFETCH_FACTOR * max(workers, 1) + 1:
        least = PREFETCH_FACTOR * max(workers, 1) + 1
        issues.append(
            ConfigIssue(
                "n_checkpoints",
                f"{kept} is too few for num_workers={workers}: Energon keeps at least "
                f"{PREFETCH_FACTOR} x max(num_workers, 1) + 1 = {least} internal checkpoints to "
                "cover the batches its workers prefetch",
            )
        )
    partitions = _positive(values.get("data_partitions"))
    ranks = dp_size or 1  # a config file alone: at least the workers of one rank
    if partitions is not None and partitions < ranks * max(workers, 1):
        issues.append(
            ConfigIssue(
                "data_partitions",
                f"{partitions} is fewer than the workers reading them: data-parallel size x "
                f"max(num_workers, 1) = {ranks} x {max(workers, 1)} = {ranks * max(workers, 1)}",
            )
        )
    buffer = values.get("packing_buffer_size")
    if packing and buffer is None:
        issues.append(
            ConfigIssue(
                "packing_buffer_size",
                "a packing strategy is selected but packing_buffer_size is not set, so nothing "
                "would be packed: set packing_buffer_size (how many encoded samples the strategy "
                "chooses from, e.g. 32) or remove packing",
            )
        )
    if packing is False and named_encoder and _positive(buffer) is not None:
        issues.append(
            ConfigIssue(
                "packing",
                f"packing_buffer_size is {buffer} but no packing strategy is selected: select "
                "one (packing: {name: first-fit-decreasing}) or remove packing_buffer_size",
            )
        )
    return issues


def _positive(value: Any) -> int | None:
    try:
        number = _integer(value)
    except ValueError:
        return None
    return number if number >= 1 else None


def raise_issues(issues: Iterable[ConfigIssue], who: str = "EnergonMultiModalDataModule") -> None:
    """Raise one :class:`ConfigError` naming every issue in one paragraph (nothing if none); a
    field two checks refuse is named once, by the first."""
    first: dict[str, ConfigIssue] = {}
    for issue in issues:
        first.setdefault(issue.path, issue)
    if first:
        issues = list(first.values())
        raise ConfigError(f"{who}: " + "; ".join(str(issue) for issue in issues))


# -- pydantic errors as issues -------------------------------------------------------------------


def issue_from_pydantic(
    error: Any,
    root: type[BaseModel],
    prefix: str = "",
    mapping_keys: Iterable[str] = (),
) -> ConfigIssue:
    """One pydantic error as a :class:`ConfigIssue` (dotted path, "did you mean" for unknown
    keys, the offending value for wrong types).

    ``mapping_keys``: keys whose value must be a ``{name, options}`` mapping (their type
    errors say so).
    """
    loc = [str(part) for part in error["loc"]]
    path = ".".join(p for p in (prefix, ".".join(loc)) if p) or "<root>"
    kind = error["type"]
    if kind == "extra_forbidden":
        known = known_keys(root, loc[:-1])
        message = f"unknown key{did_you_mean(loc[-1], known)}"
        if known:
            message += f"; known keys here: {', '.join(sorted(known))}"
        return ConfigIssue(path, message)
    if kind == "missing":
        return ConfigIssue(path, "required key is missing")
    message = error["msg"]
    if kind == "value_error":  # our own validators: "Value error, must be ..."
        message = message.removeprefix("Value error, ")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        message = "expected a mapping" + (
            " like {name: ..., options: {...}}" if loc and loc[-1] in set(mapping_keys) else ""
        )
    if "input" in error and not isinstance(error["input"], Mapping) and "got " not in message:
        message += f" (got {_short(error['input'])})"
    if kind == "less_than_equal" and loc and loc[-1] in BOUND_REASONS:
        message += f": {BOUND_REASONS[loc[-1]]}"
    return ConfigIssue(path, message)


BOUND_REASONS: dict[str, str] = {
    "seq_length": "no model has a longer context; a larger value is usually a typo",
    "decoder_seq_length": "no model has a longer context; a larger value is usually a typo",
    "shuffle_buffer_size": "Energon fills the whole buffer with decoded samples before the first "
    "batch, so a larger buffer waits (and grows) without end",
    "packing_buffer_size": "the buffer holds encoded samples with their pixel tensors",
    "num_workers": "each worker is a process of its own",
    "num_val_workers": "each worker is a process of its own",
}
"""Why a setting has its upper bound, added to the message of a value above it."""


def known_keys(root: type[BaseModel], loc: list[str]) -> list[str]:
    """The field names of the model found by walking ``loc`` from ``root`` (empty if unknown)."""
    model: Any = root
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        field = model.model_fields.get(part)
        if field is None:
            return []
        model = _model_in(field.annotation)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside ``annotation`` (``Model``, ``Model | None``, ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
