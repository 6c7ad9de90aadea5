"""Plugin names: what ``register(...)`` accepts, how a name selects a spec, and conflicts.

A name is a plain name, an alias or ``distribution:name`` (distributions compared as PEP 503
normalises them). A plain name that several distributions claim is a conflict whose message
names each of them; an unknown name suggests the closest one. One distribution registering a
name twice is an error at registration.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from energon_plugins._suggest import did_you_mean
from energon_plugins.errors import PluginConflictError, PluginNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    import pydantic

    from energon_plugins.host._spec import Factory, LoadFailure, PluginSpec

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REF_RE = re.compile(r"^[\w.]+:[\w.]+$")


def canonical_distribution(name: str) -> str:
    """Normalise a distribution name as PEP 503 does (``Energon_Plugins`` -> ``energon-plugins``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# -- what register(...) accepts ---------------------------------------------------------------


def check_name(name: Any, what: str) -> str:
    """``name`` if it is a valid plugin name or alias (``what`` says which, for the message).

    Raises:
        ValueError: not letters, digits, ``.``, ``_`` or ``-`` (a ``:`` is reserved).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"plugin {what} must be letters, digits, '.', '_' or '-' (no ':'), got {name!r}")
    return name


def check_aliases(aliases: Iterable[str] | str) -> tuple[str, ...]:
    """The aliases as a tuple (a single string is one alias), each checked by :func:`check_name`."""
    values = (aliases,) if isinstance(aliases, str) else tuple(aliases)
    return tuple(check_name(alias, "alias") for alias in values)


def check_factory(factory: Any) -> Factory | str:
    """``factory`` if it is a callable or a ``"module:attr"`` string.

    Raises:
        ValueError: anything else.
    """
    if callable(factory):
        return factory
    if isinstance(factory, str) and _REF_RE.match(factory):
        return factory
    raise ValueError(f"factory must be a callable or a 'module:attr' string, got {factory!r}")


def check_options(options: Any) -> type[pydantic.BaseModel] | str | None:
    """``options`` if it is None, a pydantic model class or a ``"module:attr"`` string.

    A string is not imported here (listing plugins imports no options models).

    Raises:
        ValueError: anything else.
    """
    if options is None or isinstance(options, str) and _REF_RE.match(options):
        return options
    pydantic = sys.modules.get("pydantic")  # a class given: its module imported pydantic
    if pydantic is not None and isinstance(options, type) and issubclass(options, pydantic.BaseModel):
        return options
    raise ValueError(
        f"options must be a pydantic model class, a 'module:attr' string naming one, or None, got {options!r}"
    )


# -- duplicates and conflicts -----------------------------------------------------------------


def spec_names(spec: PluginSpec) -> set[str]:
    """Every name that selects ``spec``: its plain name and its aliases."""
    return {spec.name, *spec.aliases}


def duplicate_problem(spec: PluginSpec, others: Iterable[PluginSpec]) -> str | None:
    """Why ``spec`` cannot join ``others``: a name or alias its own distribution already
    registered for the same kind (``None`` when it can)."""
    for other in others:
        if other.kind != spec.kind or other.distribution != spec.distribution:
            continue
        clash = spec_names(other) & spec_names(spec)
        if clash:
            return (
                f"{spec.kind} name {min(clash)!r} registered twice by "
                f"{spec.distribution} ({other.module} and {spec.module})"
            )
    return None


def conflicts(spec: PluginSpec, specs: Iterable[PluginSpec]) -> list[str]:
    """``"'name' also registered by DIST"`` for each other distribution claiming a name of
    ``spec`` among ``specs`` (same kind)."""
    return [
        f"{min(spec_names(other) & spec_names(spec))!r} also registered by {other.distribution}"
        for other in specs
        if other.distribution != spec.distribution and spec_names(other) & spec_names(spec)
    ]


# -- resolution -------------------------------------------------------------------------------


def select_spec(
    kind: str, name: Any, specs: Sequence[PluginSpec], failures: Sequence[LoadFailure] = ()
) -> PluginSpec:
    """The spec of ``kind`` among ``specs`` that ``name`` selects.

    ``name`` is a plain name, an alias or ``distribution:name``; an exact name wins over an
    alias. ``failures`` (plugins that did not load) are named in the not-found message.

    Raises:
        PluginNotFoundError: nothing has the name; the message suggests the closest name and
            lists the installed ones.
        PluginConflictError: the plain name is claimed by several distributions; the message
            names each and how to pick one.
    """
    if not isinstance(name, str) or not name.strip():
        raise PluginNotFoundError(f"{kind} name must be a non-empty string, got {name!r}")
    name = name.strip()
    distribution, sep, plain = name.rpartition(":")
    candidates = [s for s in specs if plain == s.name or plain in s.aliases]
    if sep:
        wanted = canonical_distribution(distribution)
        candidates = [s for s in candidates if canonical_distribution(s.distribution) == wanted]
    if not candidates:
        raise PluginNotFoundError(not_found_message(kind, name, plain, specs, failures))
    exact = [s for s in candidates if s.name == plain]
    candidates = exact or candidates
    if len(candidates) > 1:
        owners = ", ".join(f"{s.qualified_name} ({s.module})" for s in candidates)
        raise PluginConflictError(
            f"{kind} name {plain!r} is registered by {len(candidates)} distributions: "
            f"{owners}. Select one as 'distribution:{plain}', or uninstall or disable one "
            f"(ENERGON_PLUGINS_DISABLE)."
        )
    return candidates[0]


def selectable_names(specs: Iterable[PluginSpec]) -> list[str]:
    """The plain names and aliases of ``specs``, sorted."""
    return sorted({n for spec in specs for n in spec_names(spec)})


def not_found_message(
    kind: str,
    name: str,
    plain: str,
    specs: Sequence[PluginSpec],
    failures: Sequence[LoadFailure] = (),
) -> str:
    """``unknown KIND 'name' (did you mean ...). Installed: ...``, plus the plugins of that
    kind (or of no known kind) that failed to load."""
    installed = selectable_names(specs)
    message = f"unknown {kind} {name!r}{did_you_mean(plain, installed)}."
    message += f" Installed: {', '.join(installed) if installed else '(none)'}."
    failed = [f for f in failures if f.kind in (None, kind)]
    if failed:
        message += " Some plugins failed to load: " + "; ".join(f.summary for f in failed)
    return message
