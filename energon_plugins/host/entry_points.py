"""The entry points of one group, read from the ``*.dist-info`` folders on ``sys.path``.

``importlib.metadata`` costs about as much to import as the rest of ``energon-plugins list``
(it imports ``email``, ``zipfile`` and ``csv``, about 20 ms). What listing needs is small: for
every distribution installed as a ``NAME-VERSION.dist-info`` folder in a directory on
``sys.path`` (what pip and editable installs write) or a ``NAME.egg-info`` folder (what an
editable build leaves in a project's root, found when Python runs from there), the
``[group]`` section of its ``entry_points.txt`` and the ``Name`` / ``Version`` headers of its
``METADATA`` (``PKG-INFO``). This module reads exactly that, keeping ``importlib.metadata``'s
rules (``sys.path`` order, the first distribution of a normalized name wins). Where the layout
is anything else (a zip file on ``sys.path``, ``.egg`` distributions, a single-file
``.egg-info``) it hands over to ``importlib.metadata``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
from typing import Any


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    """One entry point: ``name = value`` of ``distribution`` ``version``."""

    name: str
    value: str
    distribution: str
    version: str

    def load(self) -> Any:
        """Import the module (and attribute) ``value`` names."""
        module, _, attr = self.value.split("[", 1)[0].partition(":")  # extras do not matter
        target: Any = importlib.import_module(module.strip())
        for part in filter(None, attr.strip().split(".")):
            target = getattr(target, part)
        return target


class _Unusual(Exception):
    """A layout this reader leaves to ``importlib.metadata``."""


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of ``group`` of the distributions importable from ``sys.path``."""
    try:
        return _scan(group)
    except (_Unusual, OSError, UnicodeDecodeError):
        return _with_importlib_metadata(group)


_METADATA_FILE = {".dist-info": "METADATA", ".egg-info": "PKG-INFO"}
"""Distribution folder suffix -> the file holding its ``Name`` and ``Version`` headers."""


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _scan(group: str) -> list[EntryPoint]:
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        path = entry or "."
        if not os.path.isdir(path):
            if os.path.exists(path):
                raise _Unusual(path)  # a zip archive: importlib.metadata reads those
            continue
        for name in os.listdir(path):
            lower = name.lower()
            suffix = next((s for s in _METADATA_FILE if lower.endswith(s)), None)
            if suffix is None:
                if lower.endswith(".egg"):
                    raise _Unusual(name)
                continue
            folder = os.path.join(path, name)
            if not os.path.isdir(folder):
                raise _Unusual(name)  # a single-file .egg-info
            normalized = _normalize(name[: -len(suffix)].partition("-")[0])
            if normalized in seen:
                continue  # shadowed by the same distribution earlier on sys.path
            seen.add(normalized)
            entries = _section(os.path.join(folder, "entry_points.txt"), group)
            if entries:
                dist, version = _name_and_version(os.path.join(folder, _METADATA_FILE[suffix]))
                found += [EntryPoint(n, v, dist, version) for n, v in entries]
    return found


def _section(file: str, group: str) -> list[tuple[str, str]]:
    """``(name, value)`` pairs of section ``[group]`` of an ``entry_points.txt``, if any."""
    try:
        with open(file, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return []
    entries, current = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
        elif current == group and "=" in line:
            name, _, value = line.partition("=")
            entries.append((name.strip(), value.strip()))
    return entries


def _name_and_version(file: str) -> tuple[str, str]:
    """The ``Name`` and ``Version`` headers of a ``METADATA`` file."""
    name = version = ""
    with open(file, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                break  # the end of the headers
            key, _, value = line.partition(":")
            if key == "Name":
                name = value.strip()
            elif key == "Version":
                version = value.strip()
            if name and version:
                break
    if not name:
        raise _Unusual(file)
    return name, version or "?"


def _with_importlib_metadata(group: str) -> list[EntryPoint]:
    import importlib.metadata

    out = []
    for ep in importlib.metadata.entry_points(group=group):
        dist = ep.dist
        out.append(
            EntryPoint(
                ep.name,
                ep.value,
                dist.name if dist is not None else "<unknown>",
                dist.version if dist is not None else "?",
            )
        )
    return out
