"""Applying overrides to a config mapping, before it is validated.

The rule (one, for Python and the command line alike):

1. A key with dots is a path into the config: ``"task_encoder.options.image_tokens": 4`` is
   the same as ``task_encoder={"options": {"image_tokens": 4}}``.
2. A mapping merges into the mapping already there, key by key, recursively
   (``task_encoder={"options": {...}}`` keeps the selected ``name``), except that a mapping
   naming another plugin (``image_processor={"name": "fast-clip"}``, or the dotted
   ``image_processor.name``) replaces the selection: the old plugin's options are dropped.
   Another name for the same plugin (an alias, or ``distribution:name``) is no switch.
3. Anything else, ``None`` included, replaces the value (``packing=None`` turns packing off).

The keys are the config file's keys (``sample_config``, not ``multimodal_sample_config``).
Both the config and the overrides are held to the nesting bounds of
:mod:`~energon_plugins.config.bounds` before anything is copied.
"""

import copy
from collections.abc import Mapping
from typing import Any

from energon_plugins.config.bounds import check_nesting
from energon_plugins.errors import ConfigError, EnergonPluginsError


def expand_dotted(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Turn ``{"a.b.c": v}`` into ``{"a": {"b": {"c": v}}}``, merging keys that share a prefix.

    Raises:
        ConfigError: a key is empty, has an empty part, or sets both a value and a sub-key.
    """
    result: dict[str, Any] = {}
    keys = [str(key) for key in overrides]
    for key in keys:
        clash = next((other for other in keys if other.startswith(key + ".")), None)
        value = overrides[key]
        if clash is not None and not isinstance(value, Mapping):
            raise ConfigError(f"overrides {key!r} and {clash!r} conflict: {key!r} replaces the whole value")
    for key, value in overrides.items():
        parts = str(key).split(".")
        if not all(parts):
            raise ConfigError(f"override key {key!r} has an empty part")
        patch: Any = value
        for part in reversed(parts[1:]):
            patch = {part: patch}
        result = merge(result, {parts[0]: patch}, where=str(key))
    return result


def _switches_plugin(key: str, current: Mapping[str, Any], patch: Mapping[str, Any], registry: Any) -> bool:
    """Whether ``patch`` selects another plugin than the selection ``current`` under ``key``
    (both have a ``name``, and the names select different plugins)."""
    if "name" not in current or "name" not in patch:
        return False
    if _plain_name(patch["name"]) == _plain_name(current["name"]):
        return False
    return not _same_plugin(key, current["name"], patch["name"], registry)


def _plain_name(name: Any) -> str:
    """A selection's name without surrounding whitespace or its ``distribution:`` qualifier
    (``energon-plugins:multimodal`` and ``multimodal`` select the same plugin unless two
    distributions register it, which the registry refuses by name)."""
    return str(name).strip().rpartition(":")[2].strip()


def _same_plugin(key: str, old: Any, new: Any, registry: Any) -> bool:
    """Whether two different names under selection ``key`` select one registered plugin (one
    is an alias of the other). A name the registry does not know is a switch; validation
    reports it."""
    from energon_plugins.config.model import SELECTIONS

    kind = SELECTIONS.get(key)
    if kind is None:
        return False
    try:
        if registry is None:
            from energon_plugins.host.manager import get_registry

            registry = get_registry()
        return (
            registry.resolve(kind, str(old)).qualified_name == registry.resolve(kind, str(new)).qualified_name
        )
    except EnergonPluginsError:
        return False


def merge(
    base: Mapping[str, Any], patch: Mapping[str, Any], *, where: str = "", registry: Any = None
) -> dict[str, Any]:
    """Return ``base`` with ``patch`` merged in: mappings recursively, other values replaced.

    A patch that selects another plugin (a name that is not the selected plugin's, nor one of
    its aliases in ``registry``, default the one in use) replaces the selection: the old
    plugin's ``options`` mean nothing to the new one. The registry is read only when a patch
    names a plugin differently from its selection.
    """
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    for key, value in patch.items():
        current = out.get(key)
        if (
            isinstance(value, Mapping)
            and isinstance(current, Mapping)
            and not _switches_plugin(key, current, value, registry)
        ):
            out[key] = merge(current, value, where=where, registry=registry)
        else:
            out[key] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
    return out


def apply_overrides(
    data: Mapping[str, Any], overrides: Mapping[str, Any], *, registry: Any = None
) -> dict[str, Any]:
    """Return a copy of ``data`` with ``overrides`` applied by the rule in this module's doc;
    ``registry`` (default: the one in use) tells which names are aliases of each other.

    Raises:
        ConfigError: ``data`` or ``overrides`` nest deeper or expand further than the bounds of
            :mod:`~energon_plugins.config.bounds`; an override key is malformed.
    """
    check_nesting(data, "<mapping>")
    check_nesting(overrides, "<overrides>")
    if not overrides:
        return {k: copy.deepcopy(v) for k, v in data.items()}
    return merge(data, expand_dotted(overrides), registry=registry)


def parse_set_option(item: str, flag: str = "--set") -> tuple[str, Any]:
    """Parse a command-line ``KEY=VALUE`` (``VALUE`` read as YAML: ``4``, ``null``, ``{a: 1}``).

    ``flag`` names the option in messages (``--set``, ``-o/--option``).

    Raises:
        ConfigError: no ``=``, or a value that is not valid YAML or that YAML cannot build
            (``2020-02-30``, ``0x_``), naming ``flag``, the key and the value.
    """
    import yaml

    from energon_plugins.config.safe_yaml import UnreadableValueError, load_yaml

    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{flag} expects KEY=VALUE (e.g. seq_length=4096), got {item!r}")
    try:
        value = load_yaml(text, f"{flag} {key}") if text.strip() else ""
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"{flag} {key}: value {text!r} is not valid YAML: {reason}") from exc
    except UnreadableValueError as exc:
        raise ConfigError(f"{flag} {key}: value {text!r} cannot be read: {exc.reason}") from exc
    return key, value
