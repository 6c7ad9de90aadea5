"""The registry: what plugins registered, looked up by kind and name.

A :class:`Registry` is filled by :mod:`energon_plugins.host.manager` from the entry points of the
installed distributions (or, in tests, from modules handed to it). It holds data only; nothing
here imports torch, transformers or Energon, and pydantic only when options are validated: a
plugin may register its options model as a ``"module:attr"`` string, imported on first use of
:attr:`PluginSpec.options`, so listing plugins imports no options models.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from energon_plugins._suggest import did_you_mean
from energon_plugins.host.context import BuildContext
from energon_plugins.errors import (
    EnergonPluginsError,
    PluginConflictError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionsError,
)
from energon_plugins.host.kinds import KINDS, Kind, component_problem, normalize_kind

if TYPE_CHECKING:  # pragma: no cover
    import pydantic

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_REF_RE = re.compile(r"^[\w.]+:[\w.]+$")

Factory = Callable[[Any, BuildContext], Any]


def canonical_distribution(name: str) -> str:
    """Normalise a distribution name as PEP 503 does (``Energon_Plugins`` -> ``energon-plugins``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclasses.dataclass(frozen=True)
class PluginSpec:
    """One registered component: what ``register(...)`` was called with, and who called it."""

    name: str
    kind: Kind
    factory: Factory | str
    options: type[pydantic.BaseModel] | None
    """The options model (None: no options). Registered as a ``"module:attr"`` string, it is
    imported on first access (a failure raises :class:`PluginLoadError` naming the plugin)."""
    description: str
    aliases: tuple[str, ...]
    distribution: str
    version: str
    module: str

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name == "options" and isinstance(value, str):
            value = _import_options(self, value)
            object.__setattr__(self, "options", value)
        return value

    @property
    def qualified_name(self) -> str:
        """``distribution:name``, which selects this spec even when the plain name is shared."""
        return f"{self.distribution}:{self.name}"

    @property
    def label(self) -> str:
        """How error messages name this plugin: ``task_encoder 'llava' (energon-plugin-llava)``."""
        return f"{self.kind} {self.name!r} ({self.distribution})"

    def load_factory(self) -> Factory:
        """Return the factory, importing it now if it was registered as a ``"module:attr"`` string.

        Raises:
            PluginLoadError: the string does not name an importable callable.
        """
        if callable(self.factory):
            return self.factory
        target = _import_ref(self, self.factory, "factory")
        if not callable(target):
            raise PluginLoadError(f"{self.label}: factory {self.factory!r} is not callable")
        return target

    def validate_options(
        self, options: Mapping[str, Any] | pydantic.BaseModel | None, *, path: str = "options"
    ) -> pydantic.BaseModel | None:
        """Validate ``options`` against this plugin's options model.

        Unknown keys are rejected even when the model itself allows extras, with a suggestion,
        and ``int`` fields are strict: ``True``, ``2.0`` or ``"8"`` are refused, not read as 1,
        2 or 8 (:func:`~energon_plugins.strict_types.integer_problems`).
        ``path`` prefixes field names in the message (``task_encoder.options``).

        Raises:
            PluginOptionsError: naming the plugin and every failing field.
        """
        if self.options is None:
            if options:
                raise PluginOptionsError(f"{self.label} takes no options, got {path}={options!r}")
            return None
        import pydantic

        from energon_plugins.strict_types import integer_problems

        if isinstance(options, self.options):
            return options
        if isinstance(options, pydantic.BaseModel):
            options = options.model_dump()
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise PluginOptionsError(
                f"{self.label}: {path} must be a mapping, got {type(options).__name__}"
            )
        problems = unknown_keys(self.options, options, path)
        problems += [f"{where}: {why}" for where, why in integer_problems(self.options, options, path)]
        if not problems:
            try:
                return self.options.model_validate(dict(options))
            except pydantic.ValidationError as exc:
                problems = format_validation_errors(exc, path)
        raise PluginOptionsError(f"{self.label}: invalid options:\n  " + "\n  ".join(problems))


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
        (f"{path}.{key}", f"unknown option{of}{did_you_mean(str(key), known)}; "
                          f"known: {', '.join(sorted(known)) or '(none)'}")
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


@dataclasses.dataclass(frozen=True)
class LoadFailure:
    """A plugin that failed to import or register; recorded so the others keep working."""

    distribution: str
    version: str
    entry_point: str
    stage: str
    """``import``, ``hookimpl`` or the hook name (``register_task_encoders``) that raised."""
    error: str
    kind: Kind | None = None
    traceback: str = dataclasses.field(default="", repr=False, compare=False)

    @property
    def summary(self) -> str:
        """The failure in one line."""
        return f"{self.distribution} {self.version} [{self.entry_point}] {self.stage}: {self.error}"


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """One row of :func:`energon_plugins.available`."""

    name: str
    kind: Kind | None
    distribution: str
    version: str
    description: str
    status: str
    """``ok``, ``conflict`` (the plain name is claimed by another distribution) or ``failed``."""
    aliases: tuple[str, ...] = ()
    error: str = ""
    load_seconds: float = 0.0
    """How long importing and registering the distribution's plugin modules took (every CLI
    call and every first use of the registry pays it)."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping."""
        return dataclasses.asdict(self)


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
                name=_check_name(name, "name"),
                kind=kind,
                factory=_check_factory(factory),
                options=_check_options(options),
                description=str(description or ""),
                aliases=tuple(_check_name(a, "alias") for a in _as_tuple(aliases)),
                distribution=distribution,
                version=version,
                module=module,
            )
            sink(spec)

        register.__doc__ = (
            f"register(name, factory, *, options=None, description='', aliases=()) -> a {kind}"
        )
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
                for other in [*self._specs[spec.kind], *specs[:i]]:
                    if other.kind != spec.kind or other.distribution != spec.distribution:
                        continue
                    clash = _names(other) & _names(spec)
                    if clash:
                        raise ValueError(
                            f"{spec.kind} name {sorted(clash)[0]!r} registered twice by "
                            f"{spec.distribution} ({other.module} and {spec.module})"
                        )
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
        return sorted({n for spec in self.specs(kind) for n in (spec.name, *spec.aliases)})

    def resolve(self, kind: str, name: str) -> PluginSpec:
        """Find the spec that ``name`` selects: a plain name, an alias or ``distribution:name``.

        Raises:
            PluginNotFoundError: nothing of that kind has the name; the message suggests the
                closest name and lists the installed ones.
            PluginConflictError: the plain name is claimed by several distributions; the
                message names each and how to pick one.
        """
        kind = normalize_kind(kind)
        if not isinstance(name, str) or not name.strip():
            raise PluginNotFoundError(f"{kind} name must be a non-empty string, got {name!r}")
        name = name.strip()
        distribution, sep, plain = name.rpartition(":")
        candidates = [s for s in self._specs[kind] if plain == s.name or plain in s.aliases]
        if sep:
            wanted = canonical_distribution(distribution)
            candidates = [
                s for s in candidates if canonical_distribution(s.distribution) == wanted
            ]
        if not candidates:
            raise PluginNotFoundError(self._not_found_message(kind, name, plain))
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

    def _not_found_message(self, kind: str, name: str, plain: str) -> str:
        installed = self.names(kind)
        message = f"unknown {kind} {name!r}{did_you_mean(plain, installed)}."
        message += f" Installed: {', '.join(installed) if installed else '(none)'}."
        failed = [f for f in self._failures if f.kind in (None, kind)]
        if failed:
            message += " Some plugins failed to load: " + "; ".join(f.summary for f in failed)
        return message

    def available(self, kind: str | None = None) -> list[PluginInfo]:
        """Every registered plugin (of ``kind``, if given) and every load failure."""
        kinds = KINDS if kind is None else (normalize_kind(kind),)
        rows: list[PluginInfo] = []
        for k in kinds:
            specs = self._specs[k]
            for spec in specs:
                clashes = [
                    f"{sorted(_names(s) & _names(spec))[0]!r} also registered by {s.distribution}"
                    for s in specs
                    if s.distribution != spec.distribution and _names(s) & _names(spec)
                ]
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
            raise PluginLoadError(
                f"{spec.label}: building failed: {type(exc).__name__}: {exc}"
            ) from exc
        problem = component_problem(spec.kind, component)
        if problem is not None:
            raise PluginLoadError(f"{spec.label}: its factory {problem}")
        return component


def _names(spec: PluginSpec) -> set[str]:
    return {spec.name, *spec.aliases}


def _as_tuple(value: Iterable[str] | str) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"plugin {what} must be letters, digits, '.', '_' or '-' (no ':'), got {name!r}"
        )
    return name


def _check_factory(factory: Any) -> Factory | str:
    if callable(factory):
        return factory
    if isinstance(factory, str) and re.match(r"^[\w.]+:[\w.]+$", factory):
        return factory
    raise ValueError(f"factory must be a callable or a 'module:attr' string, got {factory!r}")


def _check_options(options: Any) -> type[pydantic.BaseModel] | str | None:
    if options is None or isinstance(options, str) and _REF_RE.match(options):
        return options
    pydantic = sys.modules.get("pydantic")  # a class given: its module imported pydantic
    if pydantic is not None and isinstance(options, type) and issubclass(options, pydantic.BaseModel):
        return options
    raise ValueError(
        f"options must be a pydantic model class, a 'module:attr' string naming one, or None, "
        f"got {options!r}"
    )


def _import_ref(spec: PluginSpec, ref: str, what: str) -> Any:
    """The object a ``"module:attr"`` string names; a failure names the plugin and ``what``."""
    module_name, _, attr = ref.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:  # noqa: BLE001 - reported with the plugin's name
        raise PluginLoadError(
            f"{spec.label}: cannot import {what} {ref!r}: {type(exc).__name__}: {exc}"
        ) from exc
    return target


def _import_options(spec: PluginSpec, ref: str) -> Any:
    """The options model a ``"module:attr"`` string names (checked to be a pydantic model)."""
    import pydantic

    target = _import_ref(spec, ref, "options")
    if not (isinstance(target, type) and issubclass(target, pydantic.BaseModel)):
        raise PluginLoadError(f"{spec.label}: options {ref!r} is not a pydantic model class")
    return target
