"""The family registry: how each processor's outputs become sample fields and combine.

A :class:`FamilySpec` says, for the processor classes of one model family, which output is
the image grid, which further outputs are per-image or per-video vision inputs (``visual``:
``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``...) and how the samples'
tensors of each key combine when packing and batching, which outputs are per-token
(``token_fields``), and which tokens hold image and video embeddings (to count a medium's
tokens).
:func:`family_for` picks the spec of a processor by its class name (its own class first, then
its base classes); a processor in no family gets :data:`GENERIC`, which guesses the same
from the output shapes.

Add a family with :func:`register_family` (in your code), or from a distribution through the
``energon_plugins.hf_processor_families`` entry-point group (``name = "pkg.module:SPEC"``, a
``FamilySpec`` or a list of them), loaded the first time a processor is looked up. Combine
rules are named (:data:`COMBINE`; :func:`register_combine` adds one).

The spec type and the combine rules are in :mod:`.family_spec`, the built-in rows in
:mod:`.family_table`; every name of both is importable from here.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import threading
from collections.abc import Iterable
from typing import Any

from energon_plugin_hf_processor.family_spec import (
    COMBINE,
    Combine,
    FamilySpec,
    concat,
    image_row,
    pad_concat,
    register_combine,
)
from energon_plugin_hf_processor.family_table import BUILTIN_FAMILIES

__all__ = [
    "BUILTIN_FAMILIES",
    "COMBINE",
    "ENTRY_POINT_GROUP",
    "GENERIC",
    "Combine",
    "FamilySpec",
    "concat",
    "families",
    "family_for",
    "generic_layout",
    "image_row",
    "pad_concat",
    "register_combine",
    "register_family",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "energon_plugins.hf_processor_families"


GENERIC = FamilySpec("generic", (), pixel_values="pad_concat", default_combine="pad_concat")
"""The spec of a processor in no family: see :func:`generic_layout`."""

_lock = threading.Lock()
_by_processor: dict[str, FamilySpec] = {}
# Processor class -> specs that serve it only where the processor's attributes match.
_by_processor_attrs: dict[str, list[FamilySpec]] = {}
_by_name: dict[str, FamilySpec] = {}
_entry_points_loaded = False


def register_family(spec: FamilySpec, *, replace: bool = False) -> FamilySpec:
    """Add ``spec`` to the table (it serves the processor classes it names).

    Raises:
        ValueError: a processor class or the name is already served by another spec (pass
            ``replace=True`` to take it over).
    """
    if not isinstance(spec, FamilySpec):
        raise TypeError(f"register_family expects a FamilySpec, got {type(spec).__name__}")
    with _lock:
        _register(spec, replace=replace)
    return spec


def _register(spec: FamilySpec, *, replace: bool) -> None:
    if not replace:
        other = _by_name.get(spec.name)
        if other is not None and other is not spec:
            raise ValueError(f"family {spec.name!r} is already registered")
        for cls in spec.processors if not spec.processor_attrs else ():
            other = _by_processor.get(cls)
            if other is not None and other is not spec:
                raise ValueError(
                    f"processor class {cls} is already served by family {other.name!r} "
                    f"(register {spec.name!r} with replace=True to take it over)"
                )
    _by_name[spec.name] = spec
    for cls in spec.processors:
        if spec.processor_attrs:
            refined = [s for s in _by_processor_attrs.get(cls, []) if s.name != spec.name]
            _by_processor_attrs[cls] = [*refined, spec]
        else:
            _by_processor[cls] = spec


for _spec in BUILTIN_FAMILIES:
    _register(_spec, replace=False)


def _load_entry_points() -> None:
    """Register the specs that distributions declare in :data:`ENTRY_POINT_GROUP` (once)."""
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = ep.load()
            specs: Iterable[Any] = value if isinstance(value, (list, tuple)) else [value]
            for spec in specs:
                register_family(spec)
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not stop the others
            logger.error(
                "hf-processor: family entry point %r (%s) failed to load: %s: %s",
                ep.name,
                ep.value,
                type(exc).__name__,
                exc,
            )


def families() -> dict[str, FamilySpec]:
    """Every registered family, by name (entry points included)."""
    _load_entry_points()
    return dict(_by_name)


def family_for(processor: Any, name: str | None = None) -> FamilySpec:
    """The spec of ``processor``: the family ``name`` when given, else by class name.

    The processor's own class is looked up first, then its base classes (a subclass of
    ``Qwen2VLProcessor`` is a Qwen2-VL); for each, a spec whose ``processor_attrs`` the
    processor matches comes before the class's plain spec. :data:`GENERIC` when none matches.

    Raises:
        ValueError: ``name`` is not a registered family.
    """
    _load_entry_points()
    if name is not None:
        try:
            return _by_name[name]
        except KeyError:
            raise ValueError(
                f"family: no family {name!r}; registered: {', '.join(sorted(_by_name))}"
            ) from None
    for cls in type(processor).__mro__:
        for refined in _by_processor_attrs.get(cls.__name__, ()):
            if all(getattr(processor, k, None) == v for k, v in refined.processor_attrs.items()):
                return refined
        spec = _by_processor.get(cls.__name__)
        if spec is not None:
            return spec
    return GENERIC


def generic_layout(outputs: dict[str, Any], num_images: int, length: int, num_videos: int = 0) -> FamilySpec:
    """A spec for an unknown processor, guessed from one call's outputs.

    ``pixel_values`` is padded and concatenated per image; ``image_grid_thw`` is the grid;
    an output of shape ``(1, length)`` is per-token; any other tensor with ``num_images``
    (or ``num_videos``) rows is a per-image (per-video) ``visual`` entry (padded and
    concatenated).
    """
    visual: dict[str, str] = {}
    token_fields: list[str] = []
    grid = None
    for key, value in outputs.items():
        shape = tuple(getattr(value, "shape", ()))
        if key in ("input_ids", "attention_mask", "pixel_values", "offset_mapping"):
            continue
        if key == "image_grid_thw":
            grid = key
        elif shape == (1, length):
            token_fields.append(key)
        elif shape and shape[0] in {n for n in (num_images, num_videos) if n}:
            visual[key] = "pad_concat"
    return dataclasses.replace(
        GENERIC,
        pixel_values="pad_concat",
        grid=grid,
        visual=visual,
        token_fields=tuple(token_fields),
    )
