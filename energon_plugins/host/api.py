"""The module-level API: :func:`available` and :func:`create` on the registry in use."""

from collections.abc import Mapping
from typing import Any

from energon_plugins.host.context import BuildContext
from energon_plugins.host.manager import get_registry
from energon_plugins.host.registry import PluginInfo, PluginSpec


def available(kind: str | None = None) -> list[PluginInfo]:
    """List installed plugins of ``kind`` (all kinds if ``None``) and plugins that failed to load.

    Each entry has ``name``, ``kind``, ``distribution``, ``version``, ``description`` and
    ``status`` (``ok``, ``conflict`` or ``failed``, with ``error`` saying why).
    """
    return get_registry().available(kind)


def resolve(kind: str, name: str) -> PluginSpec:
    """Return the :class:`PluginSpec` that ``name`` selects, without building anything."""
    return get_registry().resolve(kind, name)


def create(
    kind: str,
    name: str,
    options: Mapping[str, Any] | Any = None,
    context: BuildContext | None = None,
) -> Any:
    """Build the component ``name`` of ``kind`` with validated ``options`` and ``context``.

    ``name`` is a plain name, an alias, or ``distribution:name``.
    """
    return get_registry().create(kind, name, options, context)
