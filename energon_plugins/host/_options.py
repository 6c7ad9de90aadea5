"""Validating a plugin's options, and the messages that name every failing field.

pydantic is imported only when options are validated; the helpers that only read a model's
fields (:func:`option_names`, :func:`unknown_key_problems`) are used by ``validate`` too, so
that a config check reports unknown keys the same way building a plugin does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from energon_plugins._suggest import did_you_mean
from energon_plugins.errors import PluginOptionsError

if TYPE_CHECKING:  # pragma: no cover
    import pydantic


def option_names(model: type[pydantic.BaseModel]) -> set[str]:
    """The keys ``model`` accepts: its field names and their aliases."""
    known: set[str] = set()
    for field_name, field in model.model_fields.items():
        known.add(field_name)
        if field.alias:
            known.add(field.alias)
    return known


def unknown_key_problems(
    model: type[pydantic.BaseModel], data: Mapping[str, Any], path: str, owner: str = ""
) -> list[tuple[str, str]]:
    """``(path.key, "unknown option [of OWNER] (did you mean ...); known: ...")`` for each key
    of ``data`` that ``model`` lacks."""
    known = option_names(model)
    of = f" of {owner}" if owner else ""
    return [
        (
            f"{path}.{key}",
            (
                f"unknown option{of}{did_you_mean(str(key), known)}; "
                f"known: {', '.join(sorted(known)) or '(none)'}"
            ),
        )
        for key in data
        if key not in known
    ]


def unknown_keys(model: type[pydantic.BaseModel], data: Mapping[str, Any], path: str) -> list[str]:
    """List ``path.key: unknown option ...`` for each key of ``data`` that ``model`` lacks."""
    return [f"{where}: {why}" for where, why in unknown_key_problems(model, data, path)]


def format_validation_errors(exc: pydantic.ValidationError, path: str = "") -> list[str]:
    """Turn a pydantic error into ``dotted.path: message`` lines."""
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        where = ".".join(p for p in (path, loc) if p)
        lines.append(f"{where or '<root>'}: {error['msg']}")
    return lines


def validate_options(
    label: str,
    model: type[pydantic.BaseModel] | None,
    options: Mapping[str, Any] | pydantic.BaseModel | None,
    path: str = "options",
) -> pydantic.BaseModel | None:
    """Validate ``options`` against ``model``, the options model of the plugin named ``label``.

    Unknown keys are rejected even when the model itself allows extras, with a suggestion,
    and ``int`` fields are strict: ``True``, ``2.0`` or ``"8"`` are refused, not read as 1,
    2 or 8 (:func:`~energon_plugins.strict_types.integer_problems`).
    ``path`` prefixes field names in the message (``task_encoder.options``).

    Raises:
        PluginOptionsError: naming the plugin and every failing field.
    """
    if model is None:
        if options:
            raise PluginOptionsError(f"{label} takes no options, got {path}={options!r}")
        return None
    import pydantic

    from energon_plugins.strict_types import integer_problems

    if isinstance(options, model):
        return options
    if isinstance(options, pydantic.BaseModel):
        options = options.model_dump()
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise PluginOptionsError(f"{label}: {path} must be a mapping, got {type(options).__name__}")
    problems = unknown_keys(model, options, path)
    problems += [f"{where}: {why}" for where, why in integer_problems(model, options, path)]
    if not problems:
        try:
            return model.model_validate(dict(options))
        except pydantic.ValidationError as exc:
            problems = format_validation_errors(exc, path)
    raise PluginOptionsError(f"{label}: invalid options:\n  " + "\n  ".join(problems))
