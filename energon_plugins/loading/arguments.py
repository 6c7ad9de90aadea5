"""Checking the datamodule's constructor arguments, with the config file's rules.

Every argument is checked before anything is stored or built: the shared settings
(:mod:`energon_plugins.config.settings`), the extra Energon keywords
(:mod:`energon_plugins.config.energon_arguments`), the path, the sample config, the image
processor and the packing argument; then the rules across fields. All problems are reported
together, in one :class:`~energon_plugins.ConfigError` naming every bad field. A local dataset
path is then checked (a remote ``msc://`` path is left to Energon).
"""

import os
from collections.abc import Collection, Mapping
from typing import Any

import pydantic

from energon_plugins.config.dataset_check import check_dataset, is_remote
from energon_plugins.config.energon_arguments import energon_argument_issues
from energon_plugins.config.settings import (
    SETTING_NAMES,
    ConfigIssue,
    cross_field_issues,
    raise_issues,
    settings_issues,
)
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.loading.distributed import ParallelLayout, parallel_layout
from energon_plugins.loading.encoders import named_selection

VALIDATION_MODES = ("finite", "infinite")
"""The values of the constructor's ``validation_mode``."""


def check_arguments(
    arguments: Mapping[str, Any], *, keywords: Collection[str]
) -> tuple[MultiModalSampleConfig, ParallelLayout]:
    """Check the constructor's ``arguments`` (its ``locals()``, extra keywords under ``kwargs``).

    ``keywords`` are the constructor's own keywords, suggested for a misspelt extra one.
    Returns the sample config (built from ``None``, a mapping or an instance) and the
    data-parallel layout of ``pg_collection``.

    Raises:
        ConfigError: any argument is invalid (one message naming every bad field).
        DatasetError: a local dataset path is not an Energon dataset with a train split.
    """
    settings = {name: arguments[name] for name in SETTING_NAMES}
    issues = settings_issues(settings)
    validation_mode = arguments["validation_mode"]
    if validation_mode not in VALIDATION_MODES:
        issues.append(
            ConfigIssue("validation_mode", f"must be 'finite' or 'infinite', got {validation_mode!r}")
        )
    issues += energon_argument_issues(arguments["kwargs"], other_names=keywords)
    path = arguments["path"]
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        issues.append(ConfigIssue("path", f"expected a dataset path, got {path!r:.60}"))
    sample_config, sample_config_problem = sample_config_from(arguments["multimodal_sample_config"])
    for problem in (
        sample_config_problem,
        image_processor_problem(arguments["image_processor"]),
        packing_problem(arguments["packing"]),
    ):
        if problem is not None:
            issues.append(problem)
    layout = parallel_layout(arguments["pg_collection"])
    task_encoder = arguments["task_encoder"]
    named_encoder = task_encoder is None or named_selection("task_encoder", task_encoder)
    if not issues:  # cross-field rules need well-typed values
        issues += cross_field_issues(
            settings,
            dp_size=layout.dp_size,
            packing=arguments["packing"] is not None,
            named_encoder=bool(named_encoder),
        )
    raise_issues(issues)
    if not is_remote(path):
        check_dataset(path, ("train",))
    return sample_config, layout


def sample_config_from(value: Any) -> tuple[MultiModalSampleConfig, ConfigIssue | None]:
    """The sample config from ``None``, a mapping or an instance (or the default and an issue)."""
    if value is None:
        return MultiModalSampleConfig(), None
    if isinstance(value, MultiModalSampleConfig):
        return value, None
    if isinstance(value, Mapping):
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


def image_processor_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``image_processor`` argument (``None``: nothing)."""
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


def packing_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``packing`` argument (``None``: nothing)."""
    if value is None or isinstance(value, (str, Mapping)) or callable(getattr(value, "select", None)):
        return None
    return ConfigIssue(
        "packing",
        "expected a registered packing strategy name (such as 'first-fit-decreasing'), "
        f"{{name, options}}, or an object with select(lengths, capacity); got {type(value).__name__}",
    )
