"""Markdown tables of pydantic models: one row per key (nested models as dotted keys).

No tool renders a config file's keys this way (flattened, with the YAML spelling of defaults
and the constraints), so the reference pages get them from here: the config reference from the
config model, the built-ins reference from each plugin's options model.
"""

import enum
import html
import inspect
import json
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from docs_hooks.griffe_rst import rst_to_md


def _cell(text: Any) -> str:
    """Escape text for one markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _code_cell(text: Any) -> str:
    """Text as code in a markdown table cell.

    A backtick code span would show an escaped pipe (``int \\| None``) with its backslash, so
    the cell holds an HTML ``<code>`` element with the pipe as an entity.
    """
    escaped = html.escape(str(text).replace("\n", " ").strip(), quote=False)
    return "<code>" + escaped.replace("|", "&#124;") + "</code>"


def format_annotation(annotation: Any) -> str:
    """A readable type: ``int | None``, ``Literal['right', 'drop']``, ``dict[str, Any]``."""
    if annotation is None or annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return format_annotation(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(format_annotation(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(format_annotation(a) for a in args)}]" if args else name
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b(typing|collections\.abc)\.", "", str(annotation))


def _constraints(field: Any) -> str:
    """``>= 1`` style constraints from a pydantic field's metadata."""
    parts = []
    for meta in getattr(field, "metadata", ()):
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
        min_length = getattr(meta, "min_length", None)
        if min_length:
            parts.append(f"min length {min_length}")
    return ", ".join(parts)


def _jsonable(value: Any) -> bool:
    """Whether ``value`` can be shown as JSON (the YAML a user would write)."""
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _default(field: Any) -> str:
    """The default shown in a table (``required`` when there is none)."""
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # factories that take the validated data
            return "(computed)"
    else:
        value = field.default
    if hasattr(value, "model_dump"):
        return "see below" if type(value).model_fields else _code_cell("{}")
    if isinstance(value, enum.Enum):
        value = value.value
    return _code_cell(json.dumps(value) if _jsonable(value) else repr(value))


def nested_model(annotation: Any) -> type | None:
    """The pydantic model inside ``annotation`` (``Model``, ``Model | None``), if any."""
    import pydantic

    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line, as markdown."""
    text = rst_to_md(inspect.cleandoc(doc or ""))
    return text.split("\n\n")[0].replace("\n", " ").strip()


def _field_description(model: type, name: str, field: Any) -> str:
    """The field's description, else its entry in the class docstring's ``Attributes:``."""
    if field.description:
        return field.description
    doc = inspect.cleandoc(model.__doc__ or "")
    match = re.search(rf"^\s+{re.escape(name)}:\s*(.+?)(?=^\s+\w+:|\Z)", doc, re.M | re.S)
    if match:
        return rst_to_md(" ".join(match.group(1).split()))
    nested = nested_model(field.annotation)
    return first_paragraph(nested.__doc__) if nested is not None else ""


def model_rows(model: type, prefix: str = "") -> Iterator[tuple[str, Any, type]]:
    """Yield ``(dotted key, field, owning model)`` for every field, nested models recursively."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        yield key, field, model
        nested = nested_model(field.annotation)
        if nested is not None and nested is not model:
            yield from model_rows(nested, key + ".")


def model_keys(model: type) -> list[str]:
    """Every dotted key of ``model`` (what the config reference must list)."""
    return [key for key, _, _ in model_rows(model)]


def render_model_table(model: type, prefix: str = "") -> str:
    """A markdown table of key, type, default, constraints and description."""
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for key, field, owner in model_rows(model, prefix):
        nested = nested_model(field.annotation)
        type_text = format_annotation(field.annotation)
        if nested is not None:
            type_text = type_text.replace(nested.__name__, f"{nested.__name__} (mapping)")
        description = _field_description(owner, key.rsplit(".", 1)[-1], field)
        constraints = _constraints(field)
        if constraints:
            description = f"{description} *({constraints})*".strip()
        lines.append(f"| `{key}` | {_code_cell(type_text)} | {_default(field)} | {_cell(description)} |")
    return "\n".join(lines)
