"""The registry's records: a registered component, a plugin that failed to load, a listing row.

:class:`PluginSpec` holds what ``register(...)`` was called with; its factory and options model
may be ``"module:attr"`` strings, imported only when first needed (a failure names the plugin).
Nothing here imports torch, transformers or Energon, and pydantic only when options are read.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from energon_plugins.errors import PluginLoadError
from energon_plugins.host._options import validate_options
from energon_plugins.host.context import BuildContext
from energon_plugins.host.kinds import Kind

if TYPE_CHECKING:  # pragma: no cover
    import pydantic

Factory = Callable[[Any, BuildContext], Any]
"""``factory(options, context) -> component``: how a registered component is built."""


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
        return validate_options(self.label, self.options, options, path)


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


def _import_ref(spec: PluginSpec, ref: str, what: str) -> Any:
    """The object a ``"module:attr"`` string names; a failure names the plugin and ``what``."""
    module_name, _, attr = ref.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:
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
