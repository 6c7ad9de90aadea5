"""Validating a config mapping: every problem at once, each with its dotted path.

:func:`check_config` runs all checks and returns the issues instead of stopping at the first:

- structure, types and ranges (the pydantic models in :mod:`energon_plugins.config.model`),
  with "did you mean" suggestions for unknown keys;
- each ``{name, options}`` selection against the registry: an unknown plugin name lists the
  installed names, and the options are checked against the plugin's own options model
  (``task_encoder.options.max_tiles: ...``);
- the dataset path (exists, is an Energon dataset or metadataset naming a class Energon has,
  its shards are all there and whole, and it has a ``val`` split when the config asks for
  validation: :data:`VALIDATION_KEYS`) and the tokenizer path, relative paths resolved
  against the config file's directory;
- the rules between keys and the ``energon:`` arguments, shared with the datamodule's
  constructor (:func:`energon_plugins.config.settings.cross_field_issues`,
  :func:`energon_plugins.config.energon_arguments.energon_argument_issues`): packing and
  ``packing_buffer_size`` go together, ``global_batch_size`` is a multiple of
  ``micro_batch_size``, ``energon:`` holds only what Energon's dataset factories accept.

Import-light: nothing here imports torch, transformers or Energon (plugin factories stay
``"module:attr"`` strings).
"""

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic

from energon_plugins.config.bounds import nesting_reason
from energon_plugins.config.energon_arguments import energon_argument_issues
from energon_plugins.config.model import (
    DEFAULT_BATCH_FORMAT,
    DEFAULT_IMAGE_PROCESSOR,
    DEFAULT_TASK_ENCODER,
    SELECTIONS,
    DataModuleConfig,
)
from energon_plugins.config.schedule import schedule_shape_issues
from energon_plugins.config.settings import (
    ConfigIssue,
    cross_field_issues,
    issue_from_pydantic,
)
from energon_plugins.errors import ConfigError, PluginConflictError, PluginNotFoundError
from energon_plugins.host.registry import (
    PluginSpec,
    Registry,
    option_names,
    unknown_key_problems,
)
from energon_plugins.strict_types import integer_problems

_MISSING = object()
_SELECTION_KEYS = frozenset(SELECTIONS)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class ConfigValidationError(ConfigError):
    """A config has one or more problems; :attr:`issues` lists every one with its path."""

    def __init__(self, issues: list[ConfigIssue], source: str | None = None) -> None:
        self.issues = list(issues)
        self.source = source
        where = f"config {source!r}" if source else "config"
        count = len(self.issues)
        lines = "\n".join(f"  {issue}" for issue in self.issues)
        super().__init__(f"{where} is invalid ({count} error{'s' * (count != 1)}):\n{lines}")


def check_config(
    data: Any,
    *,
    base_dir: str | Path | None = None,
    registry: Registry | None = None,
    check_paths: bool = True,
) -> tuple[DataModuleConfig | None, list[ConfigIssue]]:
    """Run every check on ``data`` and return ``(config, issues)``.

    ``config`` is the validated :class:`DataModuleConfig` (with ``path`` and ``tokenizer.path``
    resolved against ``base_dir``) when there are no issues, else ``None``.

    Args:
        data: the parsed config mapping.
        base_dir: the directory relative paths are resolved against (the config file's);
            default: the current directory.
        registry: the plugin registry to check selections against; default: the one in use.
        check_paths: check that the dataset and tokenizer exist (off for schema-only checks).
    """
    if not isinstance(data, Mapping):
        issue = ConfigIssue("<root>", f"expected a mapping of config keys, got {type(data).__name__}")
        return None, [issue]
    too_deep = nesting_reason(data)
    if too_deep is not None:
        return None, [ConfigIssue("<root>", too_deep)]
    if registry is None:
        from energon_plugins.host.manager import get_registry

        registry = get_registry()
    base = Path(base_dir) if base_dir is not None else Path.cwd()

    issues = _structure_issues(data)
    issues += _selection_issues(data, registry)
    resolved: dict[str, str] = {}
    if check_paths:
        issues += _path_issues("path", _dataset_path_issues, data, base, resolved)
        issues += _path_issues("tokenizer.path", _tokenizer_path_issues, data, base, resolved)
        issues += _validation_split_issues(data, resolved)
        issues += _schedule_issues(data, resolved)
    issues += _cross_field_issues(data)
    issues = _ordered(_unique(issues))
    if issues:
        return None, issues

    config = DataModuleConfig.model_validate(dict(data))
    if "path" in resolved:
        config = config.model_copy(update={"path": resolved["path"]})
    if "tokenizer" in resolved:
        tokenizer = config.tokenizer.model_copy(update={"path": resolved["tokenizer"]})
        config = config.model_copy(update={"tokenizer": tokenizer})
    return config, []


def validate_config(
    data: Any,
    *,
    base_dir: str | Path | None = None,
    registry: Registry | None = None,
    source: str | None = None,
    check_paths: bool = True,
) -> DataModuleConfig:
    """Validate ``data`` like :func:`check_config` and return the config.

    Raises:
        ConfigValidationError: listing every issue with its dotted path.
    """
    config, issues = check_config(data, base_dir=base_dir, registry=registry, check_paths=check_paths)
    if issues or config is None:
        raise ConfigValidationError(issues, source)
    return config


# -- structure ---------------------------------------------------------------------------------


def _structure_issues(data: Mapping[str, Any]) -> list[ConfigIssue]:
    try:
        DataModuleConfig.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        return [_issue_from_pydantic(error, DataModuleConfig) for error in exc.errors()]
    return []


def _issue_from_pydantic(error: Any, root: type[pydantic.BaseModel], prefix: str = "") -> ConfigIssue:
    return issue_from_pydantic(error, root, prefix, mapping_keys=_SELECTION_KEYS)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- plugin selections ---------------------------------------------------------------------------


def _selection_issues(data: Mapping[str, Any], registry: Registry) -> list[ConfigIssue]:
    """Resolve each ``{name, options}`` selection and check its options (on the raw data, so
    these run even when other keys are broken)."""
    issues: list[ConfigIssue] = []
    train = data.get("task_encoder", {})
    train = train if isinstance(train, Mapping) else {}
    defaults = {
        "task_encoder": DEFAULT_TASK_ENCODER,
        "image_processor": DEFAULT_IMAGE_PROCESSOR,
        "validation_task_encoder": train.get("name", DEFAULT_TASK_ENCODER),
        "packing": _MISSING,
        "batch_format": DEFAULT_BATCH_FORMAT,
    }
    for key, kind in SELECTIONS.items():
        raw = data.get(key, _MISSING)
        if raw is _MISSING:
            if key not in ("task_encoder", "image_processor"):
                continue
            raw = {}
        if raw is None or not isinstance(raw, Mapping):
            continue  # null where allowed, or a type error the structure check reports
        name = raw.get("name", defaults[key])
        if name is None and key == "validation_task_encoder":
            name = defaults[key]  # an explicit null: the train encoder's name
        if not isinstance(name, str) or not name.strip():
            continue  # missing (packing) or not a string: the structure check reports it
        options = raw.get("options")
        if key == "validation_task_encoder":
            same_name = name.strip() == str(defaults[key]).strip()
            if options is None and same_name:
                continue  # identical to the train encoder, which is checked already
        try:
            spec = registry.resolve(kind, name)
        except (PluginNotFoundError, PluginConflictError) as exc:
            issues.append(ConfigIssue(f"{key}.name", str(exc)))
            continue
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            continue
        issues += option_issues(spec, options, f"{key}.options")
    return issues


def option_issues(spec: PluginSpec, options: Mapping[str, Any], path: str) -> list[ConfigIssue]:
    """Check ``options`` against ``spec``'s options model; one issue per bad key or field.

    Unknown keys get a "did you mean" suggestion; the known keys are validated too, so every
    problem is reported at once.
    """
    model = spec.options
    if model is None:
        if options:
            return [ConfigIssue(path, f"{spec.label} takes no options, got {_short(dict(options))}")]
        return []
    known = option_names(model)
    issues = [
        ConfigIssue(where, why) for where, why in unknown_key_problems(model, options, path, owner=spec.label)
    ]
    strict = integer_problems(model, options, path)
    issues += [ConfigIssue(where, f"{why} ({spec.label})") for where, why in strict]
    refused = {where[len(path) + 1 :].split(".")[0] for where, _ in strict}  # reported once
    try:
        model.model_validate({k: v for k, v in options.items() if k in known and k not in refused})
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            issue = _issue_from_pydantic(error, model, prefix=path)
            issues.append(ConfigIssue(issue.path, f"{issue.message} ({spec.label})"))
    return issues


# -- paths -------------------------------------------------------------------------------------


def resolve_local_path(raw: str, base: Path) -> Path:
    """``raw`` with ``~`` expanded, made absolute against ``base`` when relative."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (base / path)


def dataset_path_problem(path: Path) -> str | None:
    """Why ``path`` is not an Energon dataset with a ``train`` split, or ``None`` if it is one.

    Uses the core's import-light check (a prepared folder, a metadataset YAML or a ``.jsonl``
    file), the same one the datamodule runs before building a loader, then the shards of every
    prepared folder behind ``path``
    (:func:`~energon_plugins.config.dataset_check.shard_problems`: each one the index names is
    there and whole; the train split, and a val split when there is one, hold samples) and the
    blends of a metadataset's train and val splits
    (:func:`~energon_plugins.config.blend_walk.blend_problems`).
    """
    from energon_plugins.config.blend_walk import blend_problems
    from energon_plugins.config.dataset_check import check_dataset, dataset_splits, shard_problems
    from energon_plugins.config.dataset_fit import dataset_parts
    from energon_plugins.errors import DatasetError

    if not path.exists():
        return f"dataset {str(path)!r} does not exist"
    try:
        kind = check_dataset(path, ("train",))
        if kind == "webdataset":
            splits = [s for s in ("train", "val") if s in dataset_splits(path)[1]]
            problems = shard_problems(path, splits)
        elif kind == "metadataset":  # check_dataset walked the train blend; the val blend too
            val = [s for s in ("val",) if s in dataset_splits(path)[1]]
            problems = blend_problems(path, val)
            problems += [p for part in dataset_parts(path) for p in shard_problems(part.path)]
        else:
            problems = []
    except DatasetError as exc:
        return str(exc)
    return "; ".join(problems) or None


VALIDATION_KEYS = ("val_batches_per_evaluation", "validation_task_encoder", "num_val_workers")
"""Keys that ask for validation: with one of them set, a dataset without a ``val`` split is an
error (``val_dataloader()`` would raise); without, validation is the training loop's choice and
a missing split is a warning of ``validate``."""


def missing_val_split(path: str) -> bool:
    """Whether the dataset at ``path`` (local or ``msc://``) has no ``val`` split (a ``.jsonl``
    file, another URL or a path that cannot be read: not known, ``False``)."""
    from energon_plugins.config.dataset_check import dataset_splits, is_remote
    from energon_plugins.errors import DatasetError

    if is_remote(path) and not path.startswith("msc://"):  # msc:// is read over the storage client
        return False
    try:
        kind, splits = dataset_splits(path)
    except (DatasetError, OSError):
        return False
    return kind != "jsonl" and "val" not in splits


def _validation_split_issues(data: Mapping[str, Any], resolved: Mapping[str, str]) -> list[ConfigIssue]:
    asking = [key for key in VALIDATION_KEYS if data.get(key) is not None]
    if not asking or "path" not in resolved or not missing_val_split(resolved["path"]):
        return []
    return [
        ConfigIssue(
            "path",
            f"the dataset {resolved['path']!r} has no 'val' split, but {', '.join(asking)} "
            f"ask{'s' * (len(asking) == 1)} for validation (val_dataloader() would raise): add a "
            "val split (energon prepare --split-ratio train=0.9,val=0.1) or remove "
            f"{'it' if len(asking) == 1 else 'them'}",
        )
    ]


def _schedule_issues(data: Mapping[str, Any], resolved: Mapping[str, str]) -> list[ConfigIssue]:
    """``blend_schedule`` against the blend ``path`` names (once both are valid on their own)."""
    from energon_plugins.config.blend_plan import schedule_issues

    schedule = data.get("blend_schedule")
    if "path" not in resolved or not schedule or schedule_shape_issues(schedule):
        return []  # no blend, no schedule, or a schedule of the wrong shape (reported already)
    return schedule_issues(resolved["path"], data["blend_schedule"])


def validation_split_warning(config: DataModuleConfig) -> ConfigIssue | None:
    """A warning at ``path`` when the dataset has no ``val`` split and the config does not ask
    for validation (none of :data:`VALIDATION_KEYS`): ``val_dataloader()`` would raise, so the
    training loop must run without evaluation."""
    if any(getattr(config, key) is not None for key in VALIDATION_KEYS) or not missing_val_split(config.path):
        return None
    return ConfigIssue(
        "path",
        f"the dataset {config.path!r} has no 'val' split: val_dataloader() would raise, so train "
        "without evaluation (Megatron: --eval-iters 0) or add a val split",
    )


def _path_issues(
    key: str, check: Any, data: Mapping[str, Any], base: Path, resolved: dict[str, str]
) -> list[ConfigIssue]:
    """``check``'s issues, or one naming ``key`` when the path cannot even be looked at (a
    name part over the file system's limit, ``~user`` of an unknown user)."""
    try:
        return check(data, base, resolved)
    except (OSError, RuntimeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [ConfigIssue(key, f"cannot look at this path: {reason}")]


def _dataset_path_issues(data: Mapping[str, Any], base: Path, resolved: dict[str, str]) -> list[ConfigIssue]:
    raw = data.get("path")
    if not isinstance(raw, str) or not raw.strip():
        if isinstance(raw, str):
            return [ConfigIssue("path", "must not be empty")]
        return []
    if "://" in raw:  # a remote (multi-storage-client) URL: Energon checks it when loading
        resolved["path"] = raw
        return []
    path = resolve_local_path(raw, base)
    problem = dataset_path_problem(path)
    if problem is not None:
        if not Path(raw).expanduser().is_absolute():
            problem += f" (relative paths are resolved against {str(base)!r})"
        return [ConfigIssue("path", problem)]
    resolved["path"] = str(path.resolve())
    return []


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache directory, found from the environment without importing it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def _tokenizer_path_issues(
    data: Mapping[str, Any], base: Path, resolved: dict[str, str]
) -> list[ConfigIssue]:
    section = data.get("tokenizer")
    if not isinstance(section, Mapping):
        return []
    raw = section.get("path")
    if not isinstance(raw, str) or not raw.strip():
        return [ConfigIssue("tokenizer.path", "must not be empty")] if isinstance(raw, str) else []
    path = resolve_local_path(raw, base)
    if path.is_dir():
        resolved["tokenizer"] = str(path.resolve())
        return []
    if path.exists():
        return [ConfigIssue("tokenizer.path", f"{str(path)!r} is a file; expected a tokenizer directory")]
    looks_local = raw.startswith((".", "/", "~"))
    if _HUB_ID.match(raw) and not looks_local:
        cache = hf_cache_dir() / ("models--" + raw.replace("/", "--"))
        if cache.is_dir():
            return []
        return [
            ConfigIssue(
                "tokenizer.path",
                f"no directory {str(path)!r} and no hub id {raw!r} in the local Hugging Face "
                f"cache ({str(hf_cache_dir())!r}); downloads are disabled",
            )
        ]
    return [ConfigIssue("tokenizer.path", f"tokenizer directory {str(path)!r} does not exist")]


# -- cross-field -------------------------------------------------------------------------------


def _cross_field_issues(data: Mapping[str, Any]) -> list[ConfigIssue]:
    packing = data.get("packing")
    selected = None  # a wrong type: the structure check reports it
    if packing is None:
        selected = False
    elif isinstance(packing, Mapping):
        selected = True
    issues = cross_field_issues(data, packing=selected)
    energon = data.get("energon")
    if isinstance(energon, Mapping):
        issues += energon_argument_issues(energon, prefix="energon.", owner="key")
    return issues


# -- ordering ----------------------------------------------------------------------------------


def _unique(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    seen: set[ConfigIssue] = set()
    out = []
    for issue in issues:
        if issue not in seen:
            seen.add(issue)
            out.append(issue)
    return out


def _ordered(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    names = ["path", *(n for n in DataModuleConfig.model_fields if n != "path")]
    order = {name: index for index, name in enumerate(names)}
    return sorted(issues, key=lambda i: order.get(i.path.split(".", 1)[0], len(order)))
