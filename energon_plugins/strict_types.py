"""Strict scalar types, one rule for every config value the project validates.

``True``, ``2.0`` or ``"8"`` are refused where an integer is expected (pydantic's lax mode
would read them as 1, 2 and 8: ``image_token_id: yes`` in a YAML file would mean token 1), and
``1`` or ``"yes"`` where a boolean is. The annotated types serve the project's own models
(:data:`Integer`, :data:`Number`, :data:`Boolean`); :func:`integer_problems` applies the
integer rule to the plain ``int`` fields of a plugin's options model, so plugin authors get it
without writing anything. Import-light: pydantic only.
"""

import operator
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def strict_integer(value: Any) -> Any:
    """An ``int`` (or NumPy integer) as ``int``; ``bool``, ``float`` and ``str`` are refused."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ValueError(f"must be an integer, got {short_repr(value)}")
    return operator.index(value)


def strict_number(value: Any) -> Any:
    """An ``int`` or ``float`` (or NumPy number) as ``float``; ``bool`` and ``str`` are refused."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(type(value), "__float__"):
        raise ValueError(f"must be a number, got {short_repr(value)}")
    return float(value)


def strict_boolean(value: Any) -> Any:
    """``True`` or ``False`` as they are; ``1``, ``"yes"`` and other truthy values are refused."""
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {short_repr(value)}")
    return value


Integer = Annotated[int, BeforeValidator(strict_integer)]
"""An integer field that refuses booleans, floats and strings."""
Number = Annotated[float, BeforeValidator(strict_number)]
"""A number field that refuses booleans and strings."""
Boolean = Annotated[bool, BeforeValidator(strict_boolean)]
"""A boolean field that refuses ``1``, ``"yes"`` and other truthy values."""


def _plain(annotation: Any) -> Any:
    """``annotation`` without ``None`` in a union (``int | None`` -> ``int``)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def integer_problems(model: type[BaseModel], data: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """``(path.key, "must be an integer, got ...")`` for each value of ``data`` given to an
    ``int`` field of ``model`` that :func:`strict_integer` refuses; nested models are followed
    where ``data`` holds a mapping for them."""
    problems = []
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    fields.update(model.model_fields)
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            continue
        annotation = _plain(field.annotation)
        if annotation is int and value is not None:
            try:
                strict_integer(value)
            except ValueError as exc:
                problems.append((f"{path}.{key}", str(exc)))
        elif (
            isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, Mapping)
        ):
            problems += integer_problems(annotation, value, f"{path}.{key}")
    return problems
