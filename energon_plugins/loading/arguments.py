"""Checking the datamodule's constructor arguments, with the config file's rules.

Every argument is checked before anything is stored or built. First the shape of every
mapping or list argument: one that contains itself, nests deeper or expands further than the
config's bounds (:mod:`energon_plugins.config.bounds`) is refused before anything walks it.
Then the shared settings (:mod:`energon_plugins.config.settings`, with their upper bounds such
as ``shuffle_buffer_size``), the extra Energon keywords
(:mod:`energon_plugins.config.energon_arguments`), the path, the sample config, the type of
every component argument (``tokenizer``, ``image_processor``, ``task_encoder``,
``validation_task_encoder``, ``packing``, ``batch_format``, ``device``, ``pg_collection``), the
``cache_pool`` setting;
then the rules across fields. All problems are reported together, in one
:class:`~energon_plugins.ConfigError` naming every bad field, the type given and what is
accepted. The dataset path is then checked: a local one, or an ``msc://`` URL over the storage
client (the profile, the bucket, the credentials, ``.nv-meta``, the train split); URLs of other
schemes are left to Energon.
"""

import os
from collections.abc import Collection, Mapping
from typing import Any

import pydantic

from energon_plugins.config.bounds import MAX_VALUES, nesting_reason
from energon_plugins.config.cache_pool import CachePoolSettings, cache_pool_settings, is_energon_cache_pool
from energon_plugins.config.dataset_check import check_dataset, is_checked
from energon_plugins.config.energon_arguments import energon_argument_issues
from energon_plugins.config.schedule import schedule_shape_issues
from energon_plugins.config.settings import (
    SETTING_NAMES,
    ConfigIssue,
    cross_field_issues,
    issue_from_pydantic,
    raise_issues,
    settings_issues,
)
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.loading.distributed import ParallelLayout, parallel_layout
from energon_plugins.loading.encoders import encoder_problem, selection_problem
from energon_plugins.strict_types import short_repr

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
        DatasetError: the dataset path (local or ``msc://``) is not an Energon dataset with a
            train split, or a remote one cannot be read (naming the URL and the profile).
    """
    extra = dict(arguments["kwargs"])
    issues = structure_issues({**{k: arguments[k] for k in keywords if k in arguments}, **extra})
    shapeless = {issue.path for issue in issues}  # never walked again below
    arguments = {k: (None if k in shapeless else v) for k, v in arguments.items()}
    settings = {name: arguments[name] for name in SETTING_NAMES if name not in shapeless}
    issues += settings_issues(settings)
    validation_mode = arguments["validation_mode"]
    if validation_mode not in VALIDATION_MODES and "validation_mode" not in shapeless:
        issues.append(
            ConfigIssue(
                "validation_mode", f"must be 'finite' or 'infinite', got {short_repr(validation_mode)}"
            )
        )
    issues += energon_argument_issues(
        {k: v for k, v in extra.items() if k not in shapeless}, other_names=keywords
    )
    path = arguments["path"]
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        issues.append(ConfigIssue("path", f"expected a dataset path, got {short_repr(path)}"))
    sample_config, sample_config_problem = sample_config_from(arguments["multimodal_sample_config"])
    issues += [
        problem
        for problem in (
            sample_config_problem,
            *component_issues(arguments),
            pg_collection_problem(arguments["pg_collection"]),
        )
        if problem is not None
    ]
    if "cache_pool" not in shapeless:
        issues += cache_pool_issues(arguments.get("cache_pool"))
    if "blend_schedule" not in shapeless:
        issues += schedule_shape_issues(arguments.get("blend_schedule"))
    bad = {issue.path.split(".")[0] for issue in issues}
    layout = ParallelLayout() if "pg_collection" in bad else parallel_layout(arguments["pg_collection"])
    task_encoder = arguments["task_encoder"]
    if not issues:  # cross-field rules need well-typed values
        issues += cross_field_issues(
            settings,
            dp_size=layout.dp_size,
            packing=arguments["packing"] is not None,
            named_encoder=task_encoder is None or isinstance(task_encoder, (str, Mapping)),
        )
    raise_issues(issues)
    if is_checked(path):
        check_dataset(path, ("train",))
    return sample_config, layout


# --------------------------------------------------------------------------- shapes
_CONTAINERS = (Mapping, list, tuple, set, frozenset)


def structure_issues(values: Mapping[str, Any]) -> list[ConfigIssue]:
    """One issue per mapping or list argument that contains itself, nests deeper than the
    config's bound or expands to more values (:func:`energon_plugins.config.bounds.nesting_reason`),
    named by its argument. Nothing is walked recursively."""
    issues = []
    for name, value in values.items():
        if not isinstance(value, _CONTAINERS):
            continue
        if contains_itself(value):
            issues.append(
                ConfigIssue(
                    name,
                    "contains itself (a mapping or list that holds itself, directly or further "
                    "down); pass plain, finite values",
                )
            )
            continue
        reason = nesting_reason(value)
        if reason is not None:
            issues.append(ConfigIssue(name, reason))
    return issues


def contains_itself(value: Any) -> bool:
    """Whether a mapping or list in ``value`` holds itself (depth-first, without recursion; gives
    up, answering ``False``, after :data:`~energon_plugins.config.bounds.MAX_VALUES` containers,
    which the size bound then refuses)."""
    on_path: set[int] = set()
    finished: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    visited = 0
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            on_path.discard(key)
            finished.add(key)
            continue
        if key in on_path:
            return True
        if key in finished:
            continue
        visited += 1
        if visited > MAX_VALUES:
            return False
        if isinstance(node, Mapping):
            children = [part for pair in node.items() for part in pair]
        else:
            children = list(node) if isinstance(node, _CONTAINERS) else []
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if isinstance(child, _CONTAINERS))
    return False


# --------------------------------------------------------------------------- components
def component_issues(arguments: Mapping[str, Any]) -> list[ConfigIssue | None]:
    """The type checks of the component arguments (``None`` where one is fine)."""
    issues: list[ConfigIssue | None] = [
        tokenizer_problem(arguments["tokenizer"]),
        image_processor_problem(arguments["image_processor"]),
        packing_problem(arguments["packing"]),
        batch_format_problem(arguments["batch_format"]),
        device_problem(arguments["device"]),
    ]
    for label in ("task_encoder", "validation_task_encoder"):
        value = arguments[label]
        problem = encoder_problem(value)
        if problem is None and isinstance(value, Mapping):
            problem = selection_problem(value)
        issues.append(ConfigIssue(label, problem) if problem is not None else None)
    return issues


def cache_pool_issues(value: Any) -> list[ConfigIssue]:
    """What is wrong with the ``cache_pool`` argument (empty: nothing): ``None``, an Energon
    ``CachePool`` object (used as it is), or ``{path, max_size_gb, prefetch_threads}``
    (:class:`~energon_plugins.config.cache_pool.CachePoolSettings`, each bad field named)."""
    if value is None or is_energon_cache_pool(value):
        return []
    if not isinstance(value, (Mapping, CachePoolSettings)):
        return [
            ConfigIssue(
                "cache_pool",
                "expected {path: DIR, max_size_gb: N}, CachePoolSettings, an Energon CachePool object "
                f"(such as FileStoreCachePool) or None; got {_class_or_type(value)}",
            )
        ]
    try:
        cache_pool_settings(value)
    except pydantic.ValidationError as exc:
        return [issue_from_pydantic(error, CachePoolSettings, "cache_pool") for error in exc.errors()]
    return []


def _class_or_type(value: Any) -> str:
    """How a message names ``value``'s type: ``int``, or ``the class X itself``."""
    if isinstance(value, type):
        return f"the class {value.__qualname__} itself (pass an instance of it)"
    return type(value).__name__


_NOT_COMPONENTS = (bool, int, float, complex, str, bytes, os.PathLike, Mapping, list, tuple, set, frozenset)
"""Values that are never a tokenizer or image processor object (a path, a number, a container)."""


def tokenizer_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``tokenizer`` argument (``None``: nothing)."""
    if value is None:
        return None
    accepted = "must be a loaded tokenizer (a Hugging Face tokenizer or processor) or None"
    if isinstance(value, (str, bytes, os.PathLike)):
        return ConfigIssue(
            "tokenizer",
            f"{accepted}, got a path ({short_repr(value)}): load it with "
            "transformers.AutoTokenizer.from_pretrained(path), or build the datamodule with "
            "from_config and tokenizer: {path: ...}",
        )
    usable = callable(value) or any(callable(getattr(value, m, None)) for m in ("encode", "tokenize"))
    if isinstance(value, (type, *_NOT_COMPONENTS)) or not usable:
        return ConfigIssue("tokenizer", f"{accepted}, got {_class_or_type(value)}")
    return None


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
    if value is None or (callable(value) and not isinstance(value, type)):
        return None
    hint = ""
    if isinstance(value, int) and not isinstance(value, bool):
        hint = (
            " (an integer here is usually seq_length passed positionally in Megatron-Bridge's "
            "order, which has no image_processor: pass the arguments by keyword)"
        )
    elif isinstance(value, (str, os.PathLike)):
        hint = (
            " (a name or path: build it with energon_plugins.create('image_processor', 'hf', "
            "{'path': ...}), or select it in a config as image_processor: {name, options})"
        )
    return ConfigIssue(
        "image_processor",
        "must be callable as proc(images=[...], return_tensors='pt') or None, got "
        f"{_class_or_type(value)}{hint}",
    )


def packing_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``packing`` argument (``None``: nothing)."""
    if isinstance(value, Mapping):
        problem = selection_problem(value)
        return ConfigIssue("packing", problem) if problem is not None else None
    if value is None or isinstance(value, str):
        return None
    if not isinstance(value, type) and callable(getattr(value, "select", None)):
        return None
    return ConfigIssue(
        "packing",
        "expected a registered packing strategy name (such as 'first-fit-decreasing'), "
        f"{{name, options}}, or an object with select(lengths, capacity); got {_class_or_type(value)}",
    )


def batch_format_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``batch_format`` argument's type (``None``: nothing; a name's
    registration and options are checked when the datamodule resolves it)."""
    if isinstance(value, Mapping):
        problem = selection_problem(value, name_required=False)
        return ConfigIssue("batch_format", problem) if problem is not None else None
    if value is None or isinstance(value, str) or callable(value):
        return None
    return ConfigIssue(
        "batch_format",
        "expected a registered batch format name (such as 'megatron-bridge'), {name, options}, "
        f"a callable fmt(batch), or None; got {type(value).__name__}",
    )


def device_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``device`` argument (``None``: nothing)."""
    if value is None:
        return None
    import torch

    if isinstance(value, bool) or not isinstance(value, (str, int, torch.device)):
        return ConfigIssue(
            "device",
            "expected a torch.device, a device name such as 'cuda' or 'cuda:0', a CUDA device "
            f"index, or None; got {type(value).__name__}",
        )
    try:
        torch.device(value)
    except (RuntimeError, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        return ConfigIssue("device", f"{short_repr(value)} is not a device torch knows ({reason})")
    return None


def pg_collection_problem(value: Any) -> ConfigIssue | None:
    """What is wrong with the ``pg_collection`` argument (``None``: nothing).

    It must provide the process groups the datamodule reads, each answering ``rank()`` and
    ``size()``: ``dp`` (the data-parallel rank and size; without it, ``torch.distributed``'s
    default group, as :func:`~energon_plugins.loading.distributed.parallel_layout` documents)
    and optionally ``cp`` / ``tp``. An object with none of them is refused: it would be
    ignored without a word.
    """
    if value is None:
        return None
    groups = {name: _attribute(value, name) for name in ("dp", "cp", "tp")}
    if all(group is None for group in groups.values()):
        got = "a mapping" if isinstance(value, Mapping) else _class_or_type(value)
        return ConfigIssue(
            "pg_collection",
            "expected a megatron-core ProcessGroupCollection (or an object with the same "
            "attributes): a dp group answering rank() and size() for the data-parallel rank and "
            "size, cp and tp optional; or None for torch.distributed's default group. Got "
            f"{got} with none of dp, cp, tp",
        )
    for name, group in groups.items():
        if group is not None and not all(callable(_attribute(group, m)) for m in ("rank", "size")):
            return ConfigIssue(
                f"pg_collection.{name}",
                f"expected a process group answering rank() and size(), got {type(group).__name__}",
            )
    return None


def _attribute(value: Any, name: str) -> Any:
    """``value.name``, or ``None`` when it is unset (a ``ProcessGroupCollection`` field never
    assigned raises) or cannot be read."""
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 - a property of the caller's object that fails: no group
        return None
