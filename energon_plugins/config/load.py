"""Reading a config file (YAML with the safe loader, bounded: see ``safe_yaml``; or JSON).

Errors name the file and, for syntax errors, the line and column. Both formats get the same
rules: UTF-8 text (a byte-order mark is skipped) of at most
:data:`~energon_plugins.config.bounds.MAX_CONFIG_BYTES`, a regular file (not a FIFO or a
device), no key given twice in one mapping, and the nesting bounds of
:mod:`~energon_plugins.config.bounds` (a mapping handed to :func:`load_config` included).
"""

import codecs
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.bounds import MAX_CONFIG_BYTES, check_nesting
from energon_plugins.config.safe_yaml import UnreadableValueError, load_yaml
from energon_plugins.errors import ConfigError

JSON_SUFFIXES = {".json"}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse ``path`` (YAML, or JSON when it ends in ``.json``) and return its top-level mapping.

    Raises:
        ConfigError: the file is missing, unreadable, not valid YAML/JSON, or its top level is
            not a mapping. The message names the file (and the line for syntax errors).
    """
    file = Path(path).expanduser()
    try:
        if not file.exists():
            raise ConfigError(f"config file {str(file)!r} does not exist")
        if file.is_dir():
            raise ConfigError(f"config file {str(file)!r} is a directory, expected a YAML or JSON file")
        if not file.is_file():
            raise ConfigError(f"config file {str(file)!r} is not a regular file (a pipe, socket or device)")
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config file {str(file)!r} is {size} bytes; a config file is at most "
                f"{MAX_CONFIG_BYTES // (1024 * 1024)} MiB"
            )
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(file)!r}: {exc.strerror or exc}") from exc
    text = decode_config_bytes(raw, str(file))
    return parse_config_text(text, source=str(file), json_format=file.suffix.lower() in JSON_SUFFIXES)


def decode_config_bytes(raw: bytes, source: str) -> str:
    """``raw`` as UTF-8 text (a UTF-8 byte-order mark skipped).

    Raises:
        ConfigError: the bytes are UTF-16 or UTF-32 (a byte-order mark says so) or not UTF-8,
            naming ``source`` and the first bad byte.
    """
    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if raw.startswith(bom):
            raise ConfigError(f"config file {source!r} is {name} text; save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {source!r} is not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line} "
            "cannot be read; save it as UTF-8"
        ) from exc


def parse_config_text(text: str, *, source: str = "<string>", json_format: bool = False) -> dict[str, Any]:
    """Parse config ``text`` (YAML, a superset of JSON, unless ``json_format``) into a mapping.

    Raises:
        ConfigError: a syntax error (with line and column) or a top level that is not a mapping.
    """
    try:
        data = _load_json(text, source) if json_format else load_yaml(text, source)
    except RecursionError as exc:
        raise ConfigError(f"config file {source!r} nests values too deeply to read") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {source!r} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {source!r} is not valid YAML: {_yaml_message(exc)}") from exc
    except UnreadableValueError as exc:
        raise ConfigError(
            f"config file {source!r} line {exc.line}: value {exc.text!r} cannot be read: {exc.reason}"
        ) from exc
    except ConfigError:
        raise  # load_yaml's own (alias and depth bounds, duplicate keys)
    except ValueError as exc:
        # int() of more than 4300 digits in JSON
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


class _DuplicateJsonKey(ValueError):
    """A JSON object gives ``key`` twice (raised from ``object_pairs_hook``)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of :func:`json.loads`: a dict, refusing a key given twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJsonKey(key)
        out[key] = value
    return out


def _load_json(text: str, source: str) -> Any:
    """``json.loads`` refusing duplicate keys (naming both lines) and the nesting bounds."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateJsonKey as exc:
        message = (
            f"config {source!r}: key {exc.key!r} is given twice; JSON would keep only the last, so remove one"
        )
        try:  # JSON is (nearly) YAML: its composer knows the lines of both keys
            load_yaml(text, source)
        except ConfigError as duplicate:
            if f"key {exc.key!r} is given twice" in str(duplicate):
                message = str(duplicate).replace("YAML would", "JSON would")
        except yaml.YAMLError:
            pass
        raise ConfigError(message) from None
    check_nesting(data, source)
    return data


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
        check_nesting(source, "<mapping>")
        data = dict(source)
    else:
        raise ConfigError(
            f"expected a config file path, a mapping or a DataModuleConfig, got {type(source).__name__}"
        )
    data = apply_overrides(data, overrides or {}, registry=registry)
    return validate_config(data, base_dir=base_dir, registry=registry, source=label, check_paths=check_paths)
