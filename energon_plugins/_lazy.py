"""Module attributes imported on first access (keeps heavy imports out of package import)."""

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_attributes(
    package: str, namespace: dict[str, Any], names: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` for ``package`` that import ``names`` lazily.

    ``names`` maps an attribute to the module defining it; the first access imports the module
    and caches the value in ``namespace`` (the package's ``globals()``).
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
