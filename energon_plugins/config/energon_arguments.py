"""Extra keyword arguments for Energon's dataset factories: which are accepted, and where.

The datamodule passes its own ``**kwargs`` (the config's ``energon:`` section) on to Energon's
``get_train_dataset`` and, where they describe the dataset rather than the training stream, to
``get_val_dataset``. :data:`ENERGON_DATASET_ARGUMENTS` lists what Energon 7.4 accepts there
(its signatures, and the dataset factory the remaining ``**kwargs`` reach; a test compares the
table with the installed Energon). Anything else is refused up front with the reason, instead
of coming back as a ``TypeError`` from inside the dataset factory. The values of the known
arguments are checked too (:class:`EnergonArgumentValues`): Energon takes
``virtual_epoch_length: -7`` or ``repeat: "no"`` without a word and does something else than
meant. Each value is held to the nesting bounds of :mod:`energon_plugins.config.bounds`.

Import-light: no Energon import (the table is data).
"""

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from energon_plugins._suggest import did_you_mean
from energon_plugins.config.bounds import nesting_reason
from energon_plugins.config.settings import MAX_COUNT, MAX_WORKERS, ConfigIssue, issue_from_pydantic
from energon_plugins.strict_types import Boolean, Integer


@dataclasses.dataclass(frozen=True)
class EnergonArgument:
    """Where an extra Energon argument goes: the training dataset, the validation dataset."""

    train: bool
    val: bool
    description: str


ENERGON_DATASET_ARGUMENTS: dict[str, EnergonArgument] = {
    "batch_drop_last": EnergonArgument(
        True,
        False,
        "drop each worker's last partial training batch (validation keeps every sample and pads instead)",
    ),
    "virtual_epoch_length": EnergonArgument(
        True, False, "training: end an epoch after this many batches (0: never)"
    ),
    "shuffle_over_epochs_multiplier": EnergonArgument(
        True, False, "training: shuffle shards over this many epochs (-1: with replacement)"
    ),
    "repeat": EnergonArgument(True, False, "training: loop the dataset (default true)"),
    "dataset_config": EnergonArgument(True, True, "the dataset config file in .nv-meta/"),
    "split_config": EnergonArgument(True, True, "the split config file in .nv-meta/"),
    "subflavors": EnergonArgument(True, True, "merged into every sample's __subflavors__"),
    "subset": EnergonArgument(True, True, "read only a range of the dataset"),
    "parallel_shard_iters": EnergonArgument(True, True, "shards opened in parallel per worker"),
    "part_filter": EnergonArgument(True, True, "which parts (files) of each sample to load"),
}
"""Energon's optional dataset arguments -> whether they apply to training and validation."""

ENERGON_RESERVED: dict[str, str] = {
    "path": "path",
    "split_part": "(chosen by the datamodule per loader)",
    "training": "(chosen by the datamodule per loader)",
    "worker_config": "num_workers",
    "batch_size": "micro_batch_size",
    "packing_buffer_size": "packing_buffer_size",
    "shuffle_buffer_size": "shuffle_buffer_size",
    "max_samples_per_sequence": "max_samples_per_sequence",
    "task_encoder": "task_encoder",
    "limit": "val_batches_per_evaluation",
    "checkpoint_every_sec": "checkpoint_every_sec",
    "checkpoint_every_min_n_samples": "checkpoint_every_min_n_samples",
    "n_checkpoints": "n_checkpoints",
    "cache_pool": "cache_pool",
}
"""Arguments the datamodule sets itself -> the setting (keyword and config key) that sets it."""

ENERGON_REFUSED: dict[str, str] = {
    "handler": "Energon 7.4 ignores it; bad samples follow the task encoder's on_error option",
    "ignore_decoder_errors": "Energon 7.4's datasets do not accept it; bad samples follow the "
    "task encoder's on_error option",
    "auto_decode": "deprecated by Energon; the task encoder's decoder attribute decides decoding",
    "image_decode": "deprecated by Energon; the task encoder's decoder attribute decides decoding",
    "av_decode": "deprecated by Energon; the task encoder's decoder attribute decides decoding",
    "video_decode_audio": "deprecated by Energon; the task encoder's decoder attribute decides decoding",
    "decoder": "the task encoder's decoder attribute decides decoding",
    "shuffle_over_epochs": "named shuffle_over_epochs_multiplier in get_train_dataset",
    "sample_type": "the dataset's .nv-meta/dataset.yaml names its sample type",
}
"""Names Energon knows but the datamodule refuses -> why."""


class EnergonArgumentValues(BaseModel):
    """The values Energon 7.4's dataset factories accept for the arguments of
    :data:`ENERGON_DATASET_ARGUMENTS` (``subset`` and ``part_filter``, which also take objects,
    are checked by :func:`_object_argument_issues`)."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    batch_drop_last: Boolean = False
    virtual_epoch_length: Integer = Field(default=0, ge=0, le=MAX_COUNT)
    shuffle_over_epochs_multiplier: Integer | None = 1
    repeat: Boolean = True
    dataset_config: str = Field(default="dataset.yaml", min_length=1)
    split_config: str = Field(default="split.yaml", min_length=1)
    subflavors: dict[str, Any] | None = None
    parallel_shard_iters: Integer | None = Field(default=None, ge=1, le=MAX_WORKERS)

    @field_validator("shuffle_over_epochs_multiplier")
    @classmethod
    def _multiplier(cls, value: int | None) -> int | None:
        if value is not None and value != -1 and value < 1:
            raise ValueError(f"must be -1 (shuffle with replacement), null or at least 1, got {value}")
        return value


def _object_argument_issues(arguments: Mapping[str, Any], prefix: str) -> list[ConfigIssue]:
    """``part_filter`` (part names, a callable, Energon's ``module:function`` text) and
    ``subset`` (Energon's ``DatasetSubset``, which no config file can hold), without importing
    Energon."""
    issues = []
    if "part_filter" in arguments:
        value = arguments["part_filter"]
        names = isinstance(value, list) and all(isinstance(part, str) for part in value)
        if not (
            value is None
            or isinstance(value, str)
            or names
            or (callable(value) and not isinstance(value, type))
        ):
            got = (
                "a list holding other values than part names"
                if isinstance(value, list)
                else type(value).__name__
            )
            issues.append(
                ConfigIssue(
                    f"{prefix}part_filter",
                    "expected a list of part names (such as ['jpg', 'json']), a callable part -> bool, "
                    f"Energon's 'module:function' text, or None; got {got}",
                )
            )
    if "subset" in arguments:
        value = arguments["subset"]
        kind = type(value)
        energon_subset = kind.__name__ == "DatasetSubset" and kind.__module__.startswith("megatron.energon")
        if value is not None and not energon_subset:
            issues.append(
                ConfigIssue(
                    f"{prefix}subset",
                    "expected Energon's DatasetSubset (megatron.energon.flavors.webdataset.structs."
                    f"DatasetSubset(range=..., absolute_range=...)) or None; got {kind.__name__} (a "
                    "config file selects a subset in a metadataset: subset: {range: [0, 0.5]})",
                )
            )
    return issues


def energon_value_issues(arguments: Mapping[str, Any], prefix: str = "") -> list[ConfigIssue]:
    """One issue per known argument whose value Energon would misread (or that nests beyond the
    bounds); unknown names are :func:`energon_argument_issues`'s."""
    issues = []
    known = {str(k): v for k, v in arguments.items() if str(k) in ENERGON_DATASET_ARGUMENTS}
    for name, value in list(known.items()):
        reason = nesting_reason(value)
        if reason is not None:
            issues.append(ConfigIssue(f"{prefix}{name}", reason))
            del known[name]
    issues += _object_argument_issues(known, prefix)
    try:
        EnergonArgumentValues.model_validate(known)
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            issue = issue_from_pydantic(error, EnergonArgumentValues)
            issues.append(ConfigIssue(f"{prefix}{issue.path}", issue.message))
    return issues


def energon_argument_issues(
    arguments: Mapping[str, Any],
    *,
    prefix: str = "",
    other_names: Iterable[str] = (),
    owner: str = "keyword argument",
) -> list[ConfigIssue]:
    """One issue per argument that Energon's datasets would not accept (or that is set
    elsewhere), and per known argument with a value Energon would misread.

    Args:
        arguments: the extra arguments (constructor ``**kwargs`` or the config's ``energon:``).
        prefix: prepended to each issue's path (``"energon."`` for the config).
        other_names: further names to suggest for a typo (the constructor's own keywords).
        owner: what the arguments are, for the message.
    """
    issues = energon_value_issues(arguments, prefix)
    candidates = [*ENERGON_DATASET_ARGUMENTS, *ENERGON_RESERVED, *other_names]
    for key in arguments:
        name = str(key)
        path = f"{prefix}{name}"
        if name in ENERGON_DATASET_ARGUMENTS:
            continue
        if name in ENERGON_RESERVED:
            owner_key = ENERGON_RESERVED[name]
            if owner_key.startswith("("):
                hint = f"is set by the datamodule itself {owner_key}"
            elif prefix and name == owner_key:
                hint = f"is a datamodule setting: use the top-level key {owner_key!r}"
            elif name == owner_key:
                hint = "is a datamodule setting, not an Energon dataset argument"
            else:
                hint = f"is set by the datamodule itself; use {owner_key!r}"
            issues.append(ConfigIssue(path, hint))
        elif name in ENERGON_REFUSED:
            issues.append(ConfigIssue(path, f"not accepted: {ENERGON_REFUSED[name]}"))
        else:
            issues.append(
                ConfigIssue(
                    path,
                    f"unknown {owner}{did_you_mean(name, candidates)}: not a setting of the "
                    "datamodule nor an argument Energon's get_train_dataset / get_val_dataset "
                    f"accept (those are: {', '.join(sorted(ENERGON_DATASET_ARGUMENTS))})",
                )
            )
    return issues


def split_energon_arguments(arguments: Mapping[str, Any], split: str) -> dict[str, Any]:
    """The arguments that apply to ``split`` (``"train"`` or ``"val"``)."""
    out = {}
    for key, value in arguments.items():
        spec = ENERGON_DATASET_ARGUMENTS.get(key)
        if spec is not None and (spec.train if split == "train" else spec.val):
            out[key] = value
    return out
