"""Loading plugins: entry points -> pluggy -> a :class:`Registry`, with failures isolated.

Nothing is loaded at import time. :func:`get_registry` loads once and caches; tests and tools
swap in another registry with :func:`use_registry` or :func:`isolated_registry`.

Environment:
    ``ENERGON_PLUGINS_LOAD=dist1,dist2``: load only these third-party distributions (set but
    empty: none). The core's built-ins are always loaded.
    ``ENERGON_PLUGINS_DISABLE=dist1,...``: skip these distributions.
    A misspelt ``ENERGON_PLUGINS_*`` variable, a distribution name that is not installed, or
    the core named in ``ENERGON_PLUGINS_DISABLE`` is an error, not silently ignored.

A hook's registrations count only when the hook returns: one that raises leaves nothing behind.
The time each distribution takes to import and register is kept (``energon-plugins list``
shows it), so a slow plugin is visible.
"""

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

import pluggy

from energon_plugins._suggest import did_you_mean
from energon_plugins.environment import unknown_variables
from energon_plugins.errors import ConfigError
from energon_plugins.host import hookspecs
from energon_plugins.host._markers import ENTRY_POINT_GROUP, PROJECT_NAME
from energon_plugins.host.defaults import CORE_DISTRIBUTION
from energon_plugins.host.entry_points import entry_points
from energon_plugins.host.kinds import HOOK_FOR_KIND
from energon_plugins.host.registry import LoadFailure, PluginSpec, Registry, canonical_distribution

LOAD_ENV = "ENERGON_PLUGINS_LOAD"
DISABLE_ENV = "ENERGON_PLUGINS_DISABLE"

_cached: Registry | None = None
_override: Registry | None = None
_lock = threading.RLock()


def _env_set(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {canonical_distribution(part.strip()) for part in value.split(",") if part.strip()}


def wanted_distribution(distribution: str) -> bool:
    """Whether ``ENERGON_PLUGINS_LOAD`` / ``ENERGON_PLUGINS_DISABLE`` let ``distribution`` load."""
    name = canonical_distribution(distribution)
    disabled = _env_set(DISABLE_ENV) or set()
    if name in disabled:
        return False
    only = _env_set(LOAD_ENV)
    if only is None or name == CORE_DISTRIBUTION:
        return True
    return name in only


def environment_problems(installed: Iterable[str]) -> list[str]:
    """What is wrong with the ``ENERGON_PLUGINS_*`` variables, given the ``installed`` plugin
    distributions: unknown variables (typos), distribution names in ``ENERGON_PLUGINS_LOAD`` /
    ``ENERGON_PLUGINS_DISABLE`` that no installed plugin distribution has, and the core
    disabled (every default selects its built-ins)."""
    problems = unknown_variables()
    known = sorted({canonical_distribution(name) for name in installed} - {CORE_DISTRIBUTION})
    for var in (LOAD_ENV, DISABLE_ENV):
        for name in sorted(_env_set(var) or ()):
            if var == DISABLE_ENV and name == CORE_DISTRIBUTION:
                problems.append(
                    f"{DISABLE_ENV} names {CORE_DISTRIBUTION}, the core distribution: its "
                    "built-ins are what every default selects, so it cannot be disabled "
                    "(disable third-party distributions only)"
                )
            elif name != CORE_DISTRIBUTION and name not in known:
                problems.append(
                    f"{var} names {name!r}, which is not an installed plugin distribution"
                    f"{did_you_mean(name, known)}; installed: {', '.join(known) or '(none)'}"
                )
    return problems


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Source:
    """One plugin module to register, with the distribution it came from."""

    def __init__(self, distribution: str, version: str, entry_point: str, load: Any) -> None:
        self.distribution = distribution
        self.version = version
        self.entry_point = entry_point
        self.load = load


def _entry_point_sources(group: str) -> list[_Source]:
    """The plugin modules of the installed distributions that the environment lets load.

    Raises:
        ConfigError: an ``ENERGON_PLUGINS_*`` variable is misspelt or names what is not
            installed (see :func:`environment_problems`).
    """
    sources = []
    installed = set()
    for ep in entry_points(group):
        installed.add(ep.distribution)
        if not wanted_distribution(ep.distribution):
            continue
        sources.append(_Source(ep.distribution, ep.version, f"{ep.name} = {ep.value}", ep.load))
    problems = environment_problems(installed)
    if problems:
        raise ConfigError("energon-plugins environment: " + "; ".join(problems))
    # Core first, then alphabetical: a stable order for listings and for hook calls.
    sources.sort(
        key=lambda s: (
            canonical_distribution(s.distribution) != CORE_DISTRIBUTION,
            canonical_distribution(s.distribution),
            s.entry_point,
        )
    )
    return sources


def load_registry(
    modules: Iterable[ModuleType | Any] = (),
    *,
    entry_points: bool = True,
    distribution: str = "<local>",
    group: str = ENTRY_POINT_GROUP,
) -> Registry:
    """Build a fresh :class:`Registry`.

    Args:
        modules: plugin objects (modules or instances with ``@hookimpl`` methods) to register
            in addition to the entry points, attributed to ``distribution``.
        entry_points: load the installed distributions' entry points of ``group``.
        distribution: the distribution name shown for ``modules``.
        group: the entry-point group to read.

    A module that fails to import, a hook implementation with a wrong signature, and a hook
    that raises are each recorded in ``registry.failures``; loading goes on with the others.
    """
    sources = _entry_point_sources(group) if entry_points else []
    for index, module in enumerate(modules):
        label = getattr(module, "__name__", type(module).__name__)
        sources.append(_Source(distribution, "0", f"{label}#{index}", lambda m=module: m))
    return _fill(Registry(), sources)


def _fill(registry: Registry, sources: list[_Source]) -> Registry:
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    by_plugin_name: dict[str, _Source] = {}
    for source in sources:
        started = time.perf_counter()
        try:
            plugin = source.load()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            registry.record_failure(_failure(source, "import", exc))
            continue
        finally:
            registry.record_load_time(source.distribution, time.perf_counter() - started)
        plugin_name = f"{source.distribution}:{source.entry_point}"
        try:
            pm.register(plugin, name=plugin_name)
        except Exception as exc:  # noqa: BLE001 - pluggy.PluginValidationError, duplicate registration
            registry.record_failure(_failure(source, "hookimpl", exc))
            continue
        by_plugin_name[plugin_name] = source
        for caller in pm.get_hookcallers(plugin) or ():
            if not caller.has_spec():  # a typo such as register_encoders would never be called
                known = list(HOOK_FOR_KIND.values())
                error = f"unknown hook {caller.name!r}{did_you_mean(caller.name, known)}"
                registry.record_failure(_failure(source, "hookimpl", ValueError(error)))

    for kind, hook_name in HOOK_FOR_KIND.items():
        hook = getattr(pm.hook, hook_name)
        # In the sources' order (core first, then by distribution), whatever pluggy's own
        # call order is.
        impls = {impl.plugin_name: impl for impl in hook.get_hookimpls()}
        for plugin_name, source in by_plugin_name.items():
            impl = impls.get(plugin_name)
            if impl is None:
                continue
            module_name = getattr(impl.function, "__module__", source.entry_point)
            # A hook's registrations count only if the hook returns: collect, then add all.
            pending: list[PluginSpec] = []
            register = registry.register_callback(
                kind,  # type: ignore[arg-type]
                distribution=source.distribution,
                version=source.version,
                module=module_name,
                sink=pending.append,
            )
            started = time.perf_counter()
            try:
                impl.function(register=register)
                registry.add_all(pending)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                registry.record_failure(_failure(source, hook_name, exc, kind=kind))
            finally:
                registry.record_load_time(source.distribution, time.perf_counter() - started)
    return registry


def _format_traceback(exc: BaseException) -> str:
    import traceback  # only when a plugin fails: keeps start-up light

    return "".join(traceback.format_exception(exc))


def _failure(source: _Source, stage: str, exc: BaseException, kind: Any = None) -> LoadFailure:
    return LoadFailure(
        distribution=source.distribution,
        version=source.version,
        entry_point=source.entry_point,
        stage=stage,
        error=_one_line(exc),
        kind=kind,
        traceback=_format_traceback(exc),
    )


def get_registry() -> Registry:
    """The registry in use: an override if one is active, else the cached installed plugins.

    The installed plugins are loaded on the first call and cached; :func:`reset_registry`
    forgets them (for example after changing ``ENERGON_PLUGINS_LOAD``).
    """
    global _cached
    with _lock:
        if _override is not None:
            return _override
        if _cached is None:
            _cached = load_registry()
        return _cached


def reset_registry() -> None:
    """Forget the cached registry; the next :func:`get_registry` loads the plugins again."""
    global _cached
    with _lock:
        _cached = None


@contextlib.contextmanager
def use_registry(registry: Registry) -> Iterator[Registry]:
    """Make ``registry`` the one :func:`get_registry` returns inside the ``with`` block."""
    global _override
    with _lock:
        previous, _override = _override, registry
    try:
        yield registry
    finally:
        with _lock:
            _override = previous


@contextlib.contextmanager
def isolated_registry(
    *modules: ModuleType | Any, entry_points: bool = True, distribution: str = "<local>"
) -> Iterator[Registry]:
    """A freshly loaded registry, plus ``modules``, in use for the ``with`` block only."""
    registry = load_registry(modules, entry_points=entry_points, distribution=distribution)
    with use_registry(registry):
        yield registry
