"""The registry: what plugins registered, looked up by kind and name.

A :class:`Registry` is filled by :mod:`energon_plugins.host.manager` from the entry points of the
installed distributions (or, in tests, from modules handed to it). It holds data only; nothing
here imports torch, transformers or Energon, and pydantic only when options are validated: a
plugin may register its options model as a ``"module:attr"`` string, imported on first use of
:attr:`PluginSpec.options`, so listing plugins imports no options models.

Its parts live in private modules, one job each: :mod:`~energon_plugins.host._spec` (the
records :class:`PluginSpec`, :class:`LoadFailure`, :class:`PluginInfo`),
:mod:`~energon_plugins.host._names` (argument checks, name resolution and conflicts) and
:mod:`~energon_plugins.host._options` (option validation and its messages). This module holds
the :class:`Registry` and re-exports their public names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from energon_plugins.errors import EnergonPluginsError, PluginLoadError
from energon_plugins.host._names import (
    canonical_distribution,
    check_aliases,
    check_factory,
    check_name,
    check_options,
    conflicts,
    duplicate_problem,
    select_spec,
    selectable_names,
)
from energon_plugins.host._options import (
    format_validation_errors,
    option_names,
    unknown_key_problems,
    unknown_keys,
)
from energon_plugins.host._spec import Factory, LoadFailure, PluginInfo, PluginSpec
from energon_plugins.host.context import BuildContext
from energon_plugins.host.kinds import KINDS, Kind, component_problem, normalize_kind
from energon_plugins.host.provenance import remember_origin

if TYPE_CHECKING:  # pragma: no cover
    import pydantic

__all__ = [
    "Factory",
    "LoadFailure",
    "PluginInfo",
    "PluginSpec",
    "Registry",
    "canonical_distribution",
    "format_validation_errors",
    "option_names",
    "unknown_key_problems",
    "unknown_keys",
]


class Registry:
    """Registered plugins by kind, plus the load failures, with name resolution."""

    def __init__(self) -> None:
        self._specs: dict[str, list[PluginSpec]] = {kind: [] for kind in KINDS}
        self._failures: list[LoadFailure] = []
        self._load_seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    # -- filling -----------------------------------------------------------------------------

    def register_callback(
        self,
        kind: Kind,
        *,
        distribution: str,
        version: str,
        module: str,
        sink: Callable[[PluginSpec], None] | None = None,
    ) -> Callable[..., None]:
        """Return the ``register`` callable handed to one plugin's hook for ``kind``.

        Each call checks its arguments and hands the :class:`PluginSpec` to ``sink`` (default:
        :meth:`add`); the manager collects a hook's specs and adds them only if the hook
        returns normally (:meth:`add_all`).
        """
        sink = self.add if sink is None else sink

        def register(
            name: str,
            factory: Factory | str,
            *,
            options: type[pydantic.BaseModel] | str | None = None,
            description: str = "",
            aliases: Iterable[str] = (),
        ) -> None:
            spec = PluginSpec(
                name=check_name(name, "name"),
                kind=kind,
                factory=check_factory(factory),
                # a "module:attr" string is kept as given and imported on first read of
                # PluginSpec.options, whose declared type is what a read returns
                options=check_options(options),  # type: ignore[arg-type]
                description=str(description or ""),
                aliases=check_aliases(aliases),
                distribution=distribution,
                version=version,
                module=module,
            )
            sink(spec)

        register.__doc__ = f"register(name, factory, *, options=None, description='', aliases=()) -> a {kind}"
        return register

    def add(self, spec: PluginSpec) -> None:
        """Add ``spec``; a name or alias the same distribution already registered is an error."""
        self.add_all([spec])

    def add_all(self, specs: Iterable[PluginSpec]) -> None:
        """Add every spec of ``specs``, or none: a name or alias that one distribution registers
        twice (here or already) is an error, and nothing is added."""
        specs = list(specs)
        with self._lock:
            for i, spec in enumerate(specs):
                problem = duplicate_problem(spec, [*self._specs[spec.kind], *specs[:i]])
                if problem is not None:
                    raise ValueError(problem)
            for spec in specs:
                self._specs[spec.kind].append(spec)

    def record_load_time(self, distribution: str, seconds: float) -> None:
        """Add ``seconds`` to the time spent importing and registering ``distribution``."""
        with self._lock:
            self._load_seconds[distribution] = self._load_seconds.get(distribution, 0.0) + seconds

    def load_seconds(self, distribution: str) -> float:
        """Seconds spent importing and registering ``distribution``'s plugin modules."""
        return self._load_seconds.get(distribution, 0.0)

    def record_failure(self, failure: LoadFailure) -> None:
        """Remember a plugin that failed to load."""
        with self._lock:
            self._failures.append(failure)

    # -- reading -----------------------------------------------------------------------------

    @property
    def failures(self) -> list[LoadFailure]:
        """Plugins that failed to import or register, in load order."""
        return list(self._failures)

    def specs(self, kind: str) -> list[PluginSpec]:
        """Every registered spec of ``kind``, in registration order."""
        return list(self._specs[normalize_kind(kind)])

    def names(self, kind: str) -> list[str]:
        """The selectable names of ``kind`` (plain names and aliases), sorted."""
        return selectable_names(self.specs(kind))

    def resolve(self, kind: str, name: str) -> PluginSpec:
        """Find the spec that ``name`` selects: a plain name, an alias or ``distribution:name``.

        Raises:
            PluginNotFoundError: nothing of that kind has the name; the message suggests the
                closest name and lists the installed ones.
            PluginConflictError: the plain name is claimed by several distributions; the
                message names each and how to pick one.
        """
        kind = normalize_kind(kind)
        return select_spec(kind, name, self._specs[kind], self._failures)

    def available(self, kind: str | None = None) -> list[PluginInfo]:
        """Every registered plugin (of ``kind``, if given) and every load failure."""
        kinds = KINDS if kind is None else (normalize_kind(kind),)
        rows: list[PluginInfo] = []
        for k in kinds:
            specs = self._specs[k]
            for spec in specs:
                clashes = conflicts(spec, specs)
                rows.append(
                    PluginInfo(
                        name=spec.name,
                        kind=k,
                        distribution=spec.distribution,
                        version=spec.version,
                        description=spec.description,
                        status="conflict" if clashes else "ok",
                        aliases=spec.aliases,
                        error="; ".join(clashes),
                        load_seconds=self.load_seconds(spec.distribution),
                    )
                )
        for failure in self._failures:
            if kind is None or failure.kind in (None, *kinds):
                rows.append(
                    PluginInfo(
                        name=failure.entry_point,
                        kind=failure.kind,
                        distribution=failure.distribution,
                        version=failure.version,
                        description="",
                        status="failed",
                        error=f"{failure.stage}: {failure.error}",
                        load_seconds=self.load_seconds(failure.distribution),
                    )
                )
        return rows

    def create(
        self,
        kind: str,
        name: str,
        options: Mapping[str, Any] | pydantic.BaseModel | None = None,
        context: BuildContext | None = None,
        *,
        path: str = "options",
    ) -> Any:
        """Resolve ``name``, validate ``options`` and call the factory with ``context``.

        Raises:
            PluginNotFoundError, PluginConflictError: see :meth:`resolve`.
            PluginOptionsError: the options do not validate; the message names the fields.
            PluginLoadError: the factory cannot be imported, or raised while building.
        """
        spec = self.resolve(kind, name)
        validated = spec.validate_options(options, path=path)
        factory = spec.load_factory()
        try:
            component = factory(validated, context if context is not None else BuildContext())
        except EnergonPluginsError:
            raise  # already names what is wrong (a nested create, a config or dataset error)
        except Exception as exc:
            raise PluginLoadError(f"{spec.label}: building failed: {type(exc).__name__}: {exc}") from exc
        problem = component_problem(spec.kind, component)
        if problem is not None:
            raise PluginLoadError(f"{spec.label}: its factory {problem}")
        remember_origin(component, spec.label)  # messages about its output name the plugin
        return component
