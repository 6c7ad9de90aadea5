"""Reading a config file (YAML with the safe loader, bounded: see ``safe_yaml``; or JSON).

Errors name the file and, for syntax errors, the line and column.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.safe_yaml import load_yaml
from energon_plugins.errors import ConfigError

JSON_SUFFIXES = {".json"}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse ``path`` (YAML, or JSON when it ends in ``.json``) and return its top-level mapping.

    Raises:
        ConfigError: the file is missing, unreadable, not valid YAML/JSON, or its top level is
            not a mapping. The message names the file (and the line for syntax errors).
    """
    file = Path(path).expanduser()
    if not file.exists():
        raise ConfigError(f"config file {str(file)!r} does not exist")
    if file.is_dir():
        raise ConfigError(f"config file {str(file)!r} is a directory, expected a YAML or JSON file")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {str(file)!r}: {exc}") from exc
    data = parse_config_text(text, source=str(file), json_format=file.suffix.lower() in JSON_SUFFIXES)
    return data


def parse_config_text(text: str, *, source: str = "<string>", json_format: bool = False) -> dict[str, Any]:
    """Parse config ``text`` (YAML, a superset of JSON, unless ``json_format``) into a mapping.

    Raises:
        ConfigError: a syntax error (with line and column) or a top level that is not a mapping.
    """
    try:
        data = json.loads(text) if json_format else load_yaml(text, source)
    except RecursionError as exc:
        raise ConfigError(f"config file {source!r} nests values too deeply to read") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {source!r} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {source!r} is not valid YAML: {_yaml_message(exc)}") from exc
    except ConfigError:
        raise  # load_yaml's own (alias and depth bounds)
    except (ValueError, LookupError, AttributeError) as exc:
        # PyYAML's safe constructors raise these (not YAMLError) for scalars Python cannot
        # build (2020-02-30, !!int x, 0x_); int() for over 4300 digits
        raise ConfigError(f"config file {source!r} holds a value that cannot be read: {exc}") from exc
    if data is None:
        raise ConfigError(f"config file {source!r} is empty; expected a mapping with at least 'path'")
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config file {source!r} must hold a mapping of config keys at the top level, "
            f"got {type(data).__name__}"
        )
    bad_keys = [key for key in data if not isinstance(key, str)]
    if bad_keys:
        raise ConfigError(f"config file {source!r}: keys must be strings, got {bad_keys[0]!r}")
    return dict(data)


def _yaml_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def load_config(
    source: "str | Path | Mapping[str, Any] | Any",
    overrides: Mapping[str, Any] | None = None,
    *,
    base_dir: str | Path | None = None,
    registry: Any = None,
    check_paths: bool = True,
) -> Any:
    """Read (if a path), apply ``overrides``, validate, and return a ``DataModuleConfig``.

    ``source`` is a file path, a mapping, or a ``DataModuleConfig`` (dumped and re-validated,
    so overrides are checked like file values). Relative paths in a file resolve against the
    file's directory; in a mapping against ``base_dir`` (default: the current directory).

    Raises:
        ConfigError: the file cannot be read or parsed.
        ConfigValidationError: listing every problem with its dotted path.
    """
    from energon_plugins.config.model import DataModuleConfig
    from energon_plugins.config.overrides import apply_overrides
    from energon_plugins.config.validate import validate_config

    label = None
    if isinstance(source, (str, Path)):
        label = str(source)
        data: Any = read_config_file(source)
        if base_dir is None:
            base_dir = Path(source).expanduser().resolve().parent
    elif isinstance(source, DataModuleConfig):
        data = source.model_dump(mode="json", exclude_unset=True)
    elif isinstance(source, Mapping):
        data = dict(source)
    else:
        raise ConfigError(
            f"expected a config file path, a mapping or a DataModuleConfig, got {type(source).__name__}"
        )
    data = apply_overrides(data, overrides or {}, registry=registry)
    return validate_config(data, base_dir=base_dir, registry=registry, source=label, check_paths=check_paths)
