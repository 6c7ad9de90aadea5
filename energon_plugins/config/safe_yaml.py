"""YAML for config text: PyYAML's safe loader, bounded, strict about keys and values.

``yaml.safe_load`` builds an alias as a shared reference, so a few lines of anchors and
aliases ("billion laughs") load in microseconds into a structure that expands to billions of
values the moment anything walks it (a ``repr``, a JSON dump, a deep copy). Deep nesting makes
PyYAML's recursive composer fail with a bare ``RecursionError``. Both are refused here with a
message naming the source (the bounds of :mod:`energon_plugins.config.bounds`).

:class:`ConfigLoader` (a ``SafeLoader``) also refuses what ``safe_load`` lets through silently
or with a bare ``ValueError``:

- a key given twice in one mapping (``safe_load`` keeps the last): refused naming the key and
  both lines (checked on the composed nodes, before merge keys expand: a key of ``<<: *base``
  may still be overridden, as YAML intends);
- a scalar Python cannot build (``2020-02-30``, ``0x_``, ``!!int x``): refused naming the line
  and the text, as :class:`UnreadableValueError`;
- a date, timestamp, ``!!binary`` or ``!!set``: no config value is one, and each would break
  what reads the config later (JSON dumps, checkpoint digests); refused naming the line, with a
  hint to quote text that only looks like a date.
"""

from typing import Any

import yaml

from energon_plugins.config.bounds import MAX_DEPTH, MAX_VALUES, depth_message, size_message
from energon_plugins.errors import ConfigError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "ConfigLoader", "UnreadableValueError", "load_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_REFUSED_TAGS = {
    "tag:yaml.org,2002:timestamp": "a date or timestamp",
    "tag:yaml.org,2002:binary": "binary data (!!binary)",
    "tag:yaml.org,2002:set": "a set (!!set)",
}
"""YAML types a config value is never, with how a message names them."""


class UnreadableValueError(ConfigError):
    """A YAML scalar that Python cannot build (or a type no config holds), at ``line`` (1-based).

    ``text`` is the scalar as written and ``reason`` why it was refused; the message names the
    source, the line and both.
    """

    def __init__(self, source: str, line: int, text: str, reason: str) -> None:
        self.source, self.line, self.text, self.reason = source, line, text, reason
        super().__init__(f"config {source!r} line {line}: value {text!r} cannot be read: {reason}")


def _expanded_size(node: yaml.Node, source: str) -> int:
    """Values under ``node`` with every alias expanded; refuses past :data:`MAX_VALUES`."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk: no recursion limit, each distinct node sized once.
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 1, False)]
    while stack:
        current, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(depth_message(source))
        if id(current) in sizes:
            continue
        children = _children(current)
        if not done and isinstance(current, yaml.MappingNode):
            _refuse_duplicate_keys(current, source)
        if done or not children:
            total = 1 + sum(sizes[id(child)] for child in children)
            if total > MAX_VALUES:
                raise ConfigError(size_message(source))
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


def _scalar_text(node: yaml.Node) -> str:
    """The node's text as written (a scalar's value; a collection's tag)."""
    return node.value if isinstance(node, yaml.ScalarNode) else node.tag


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's ``SafeLoader`` that refuses values Python cannot build and types no config
    holds (see the module's doc). ``source`` names the text in messages."""

    source = "<string>"

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Build ``node`` like ``SafeLoader``; a scalar that fails, or a value of a type no config
        holds, is an :class:`UnreadableValueError` naming its line."""
        try:
            value = super().construct_object(node, deep=deep)
        except ConfigError:
            raise
        except (ValueError, LookupError, AttributeError, TypeError, OverflowError) as exc:
            # PyYAML's safe constructors raise these (not YAMLError) for scalars Python
            # cannot build: a date that does not exist, int("", 16) for 0x_, a KeyError for
            # !!bool maybe, int() of more than 4300 digits
            raise UnreadableValueError(
                self.source, node.start_mark.line + 1, _scalar_text(node), str(exc) or type(exc).__name__
            ) from exc
        refused = _REFUSED_TAGS.get(node.tag)
        if refused is not None:
            hint = "; quote it if it is text" if isinstance(node, yaml.ScalarNode) else ""
            raise UnreadableValueError(
                self.source, node.start_mark.line + 1, _scalar_text(node), f"it is {refused}{hint}"
            )
        return value


def _refuse_duplicate_keys(node: yaml.MappingNode, source: str) -> None:
    """Refuse a key given twice in the mapping ``node`` (as written: before merge keys are
    expanded, so ``<<: *base`` followed by one of base's keys is an override, not a duplicate)."""
    first_line: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        key, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
        if key in first_line:
            first = first_line[key]
            where = f"twice on line {line}" if first == line else f"twice (line {first} and line {line})"
            raise ConfigError(
                f"config {source!r}: key {key_node.value!r} is given {where}; YAML would keep only "
                "the last, so remove one"
            )
        first_line[key] = line


def load_yaml(text: str, source: str = "<string>") -> Any:
    """Parse one YAML document like ``yaml.safe_load``, within the bounds above.

    Raises:
        ConfigError: the text expands beyond :data:`MAX_VALUES`, nests deeper than
            :data:`MAX_DEPTH`, or gives a key twice in one mapping.
        UnreadableValueError: a value Python cannot build, or a date, binary or set.
        yaml.YAMLError: a syntax error (the caller names the file and line).
    """
    loader = ConfigLoader(text)
    loader.source = source
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
