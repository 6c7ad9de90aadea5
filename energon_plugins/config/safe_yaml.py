"""YAML for config text: PyYAML's safe loader, bounded in alias expansion and nesting.

``yaml.safe_load`` builds an alias as a shared reference, so a few lines of anchors and
aliases ("billion laughs") load in microseconds into a structure that expands to billions of
values the moment anything walks it (a ``repr``, a JSON dump, a deep copy). Deep nesting makes
PyYAML's recursive composer fail with a bare ``RecursionError``. Both are refused here with a
message naming the source.
"""

from typing import Any

import yaml

from energon_plugins.errors import ConfigError

MAX_VALUES = 100_000
"""Most values a config may expand to, counting every alias as a full copy."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences a config may have."""


def _expanded_size(node: yaml.Node, source: str) -> int:
    """Values under ``node`` with every alias expanded; refuses past :data:`MAX_VALUES`."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk: no recursion limit, each distinct node sized once.
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 1, False)]
    while stack:
        current, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"config {source!r} nests mappings or lists deeper than {MAX_DEPTH} levels")
        if id(current) in sizes:
            continue
        children = _children(current)
        if done or not children:
            total = 1 + sum(sizes[id(child)] for child in children)
            if total > MAX_VALUES:
                raise ConfigError(
                    f"config {source!r} expands to more than {MAX_VALUES} values through YAML "
                    "anchors and aliases; write the values out instead of aliasing them"
                )
            sizes[id(current)] = total
            continue
        stack.append((current, depth, True))
        stack.extend((child, depth + 1, False) for child in children if id(child) not in sizes)
    return sizes[id(node)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document like ``yaml.safe_load``, within the bounds above.

    Raises:
        ConfigError: the text expands beyond :data:`MAX_VALUES` or nests deeper than
            :data:`MAX_DEPTH`.
        yaml.YAMLError: a syntax error (the caller names the file and line).
    """
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError as exc:
            raise ConfigError(f"config {source!r} nests mappings or lists too deeply to read") from exc
        if node is None:
            return None
        _expanded_size(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()
