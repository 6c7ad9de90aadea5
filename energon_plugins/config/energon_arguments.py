"""Extra keyword arguments for Energon's dataset factories: which are accepted, and where.

The datamodule passes its own ``**kwargs`` (the config's ``energon:`` section) on to Energon's
``get_train_dataset`` and, where they describe the dataset rather than the training stream, to
``get_val_dataset``. :data:`ENERGON_DATASET_ARGUMENTS` lists what Energon 7.4 accepts there
(its signatures, and the dataset factory the remaining ``**kwargs`` reach; a test compares the
table with the installed Energon). Anything else is refused up front with the reason, instead
of coming back as a ``TypeError`` from inside the dataset factory.

Import-light: no Energon import (the table is data).
"""

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from energon_plugins._suggest import did_you_mean
from energon_plugins.config.settings import ConfigIssue


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
    "cache_pool": "not supported by the datamodule's loaders",
    "shuffle_over_epochs": "named shuffle_over_epochs_multiplier in get_train_dataset",
    "sample_type": "the dataset's .nv-meta/dataset.yaml names its sample type",
}
"""Names Energon knows but the datamodule refuses -> why."""


def energon_argument_issues(
    arguments: Mapping[str, Any],
    *,
    prefix: str = "",
    other_names: Iterable[str] = (),
    owner: str = "keyword argument",
) -> list[ConfigIssue]:
    """One issue per argument that Energon's datasets would not accept (or that is set elsewhere).

    Args:
        arguments: the extra arguments (constructor ``**kwargs`` or the config's ``energon:``).
        prefix: prepended to each issue's path (``"energon."`` for the config).
        other_names: further names to suggest for a typo (the constructor's own keywords).
        owner: what the arguments are, for the message.
    """
    issues = []
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
