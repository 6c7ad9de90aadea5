"""Which registered plugin built a component, for messages about what the component returned.

:meth:`Registry.create <energon_plugins.host.registry.Registry.create>` remembers the plugin
of every component it builds (:func:`remember_origin`); :func:`plugin_label` gives it back,
``task_encoder 'llava' (energon-plugin-llava)``, where a component's output breaks its kind's
contract. A component built elsewhere (an object handed to the datamodule) is named by its
class. The component itself is left untouched (no attribute is set on it, so a transformers
processor's saved config stays the same); the record goes when the component does.
"""

from __future__ import annotations

import weakref
from typing import Any

_ORIGINS: dict[int, tuple[weakref.ref[Any], str]] = {}
"""``id(component)`` -> (a weak reference to it, its plugin's label). No lock: the weak
reference's callback may run from the garbage collector inside any allocation, also while this
thread is in the middle of :func:`remember_origin`; single dict operations are atomic under the
GIL, and a lost race only drops a label (the message then names the class)."""


def remember_origin(component: Any, label: str) -> None:
    """Record that the plugin ``label`` built ``component`` (nothing for an object that
    cannot be weakly referenced; :func:`plugin_label` then names its class)."""
    key = id(component)

    def forget(ref: weakref.ref[Any]) -> None:
        if _ORIGINS.get(key, (None, ""))[0] is ref:
            _ORIGINS.pop(key, None)

    try:
        ref = weakref.ref(component, forget)
    except TypeError:
        return
    _ORIGINS[key] = (ref, label)


def plugin_label(component: Any, kind: str) -> str:
    """How messages name ``component`` of ``kind``: its plugin's label (``kind 'name'
    (distribution)``) when the registry built it, else ``kind ClassName (not a registered
    plugin)``."""
    ref, label = _ORIGINS.get(id(component), (None, ""))
    if ref is not None and ref() is component:
        return label
    return f"{kind} {type(component).__qualname__} (not a registered plugin)"
