"""How big a config may be: its file, its nesting and its number of values.

One bound for every way a config arrives (a YAML or JSON file, ``--set`` text, a mapping handed
to :func:`~energon_plugins.config.load.load_config` or ``from_config``, the constructor's extra
Energon keywords), with one message: a structure nested deeper than :data:`MAX_DEPTH` would make
the recursive steps after it (the overrides' deep copy, pydantic, a checkpoint's digest of the
values) fail with a bare ``RecursionError``; one that expands to more than :data:`MAX_VALUES`
values (shared references, YAML aliases) would take minutes to copy or print. Import-light: no
third-party module.
"""

from collections.abc import Mapping
from typing import Any

from energon_plugins.errors import ConfigError

MAX_VALUES = 100_000
"""Most values a config may expand to, counting every alias or shared reference as a full copy."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists a config may have."""

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""Largest config file read (4 MiB; a datamodule config is a few hundred bytes)."""


DEPTH_REASON = f"nests mappings or lists deeper than {MAX_DEPTH} levels"
"""What a config nested beyond :data:`MAX_DEPTH` does (the message follows the source's name)."""

SIZE_REASON = (
    f"expands to more than {MAX_VALUES} values through YAML anchors and aliases or shared "
    "references; write the values out instead of aliasing them"
)
"""What a config beyond :data:`MAX_VALUES` does (the message follows the source's name)."""


def depth_message(source: str) -> str:
    """The message of a config nested deeper than :data:`MAX_DEPTH` (YAML, JSON or a mapping)."""
    return f"config {source!r} {DEPTH_REASON}"


def size_message(source: str) -> str:
    """The message of a config that expands to more than :data:`MAX_VALUES` values."""
    return f"config {source!r} {SIZE_REASON}"


def nesting_reason(value: Any) -> str | None:
    """Why ``value`` is beyond the bounds (:data:`DEPTH_REASON` or :data:`SIZE_REASON`), or
    ``None`` when it is within them.

    Walks mappings, lists and tuples without recursion (so a structure of any depth, or one that
    contains itself, is measured without a ``RecursionError``); a shared sub-structure counts once
    per reference, as a deep copy would copy it.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        current, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return SIZE_REASON
        if isinstance(current, Mapping):
            children: Any = [part for pair in current.items() for part in pair]
        elif isinstance(current, (list, tuple)):
            children = current
        else:
            continue
        if children and depth >= MAX_DEPTH:
            return DEPTH_REASON
        stack.extend((child, depth + 1) for child in children)
    return None


def check_nesting(value: Any, source: str) -> None:
    """Refuse ``value`` when :func:`nesting_reason` finds it beyond the bounds.

    Raises:
        ConfigError: ``config SOURCE nests ...`` (the message YAML text gets too).
    """
    reason = nesting_reason(value)
    if reason is not None:
        raise ConfigError(f"config {source!r} {reason}")
