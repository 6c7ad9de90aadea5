"""Tiny processors of further families, one module per family.

Each module here defines ``SPECS``, a tuple of :class:`~energon_plugin_hf_processor.tiny_spec.TinySpec`
(with the family's chat template and special tokens beside it); :func:`discovered_specs`
finds them all, so adding a family is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil

from energon_plugin_hf_processor.tiny_spec import TinySpec


def discovered_specs() -> tuple[TinySpec, ...]:
    """Every ``SPECS`` entry of this package's modules, in module-name order."""
    specs: list[TinySpec] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        specs.extend(module.SPECS)
    return tuple(specs)
