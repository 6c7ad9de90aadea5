"""Checks of the auxiliary sources a metadataset leaf declares (``aux:``), before a loader starts.

A metadataset (v2) leaf may name auxiliary sources that its crude samples' media are read from
(Energon's polylithic datasets)::

    splits:
      train:
        path: msc://store/bucket/conversations     # crude: the samples name their media
        aux:
          media: filesystem+msc://media/bucket/images
        subflavors: {format: chatml}

A source is a prepared Energon dataset (a path, or ``msc://...``) or a folder of files
(``filesystem://PATH``, local; ``filesystem+msc://...``, remote); relative paths resolve against
the metadataset's folder, as Energon resolves them. Energon finds a wrong source only when the
loader is built (an ``AssertionError``), and a cooker without a keyword argument for a source
fails on every sample. :func:`aux_problems` checks up front that each source is there, that the
leaf is crude (Energon reads aux sources only while cooking) and that the matching cookers take
a keyword argument for each source.
"""

import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from energon_plugins.config.dataset_check import META_DIR
from energon_plugins.config.remote_storage import first_names, is_file, is_msc, join_url, parent_url
from energon_plugins.errors import DatasetError

INDEX_FILE = "index.sqlite"
"""What a prepared dataset used as an aux source needs in ``.nv-meta/`` (Energon asserts it)."""

_URL = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<rest>.*)$", re.I)


def resolve_aux(reference: str, source: "Path | str | None") -> tuple[str, "Path | str"]:
    """``(kind, target)`` of an aux ``reference`` in the metadataset ``source``: ``"folder"`` or
    ``"dataset"``, and a local path or an ``msc://`` URL.

    Raises:
        DatasetError: a scheme Energon does not read as an aux source.
    """
    match = _URL.match(reference)
    kind, target = "dataset", reference
    if match:
        scheme, rest = match.group("scheme").lower(), match.group("rest")
        if scheme == "filesystem":
            kind, target = "folder", rest
        elif scheme.startswith("filesystem+"):
            kind, target = "folder", f"{scheme.split('+', 1)[1]}://{rest}"
        elif scheme != "msc":
            raise DatasetError(
                f"{reference!r} is not an aux source Energon reads: use a prepared dataset (a path "
                "or msc://...), or a folder as filesystem://PATH or filesystem+msc://..."
            )
    if is_msc(target):
        return kind, target
    if "://" in target:
        raise DatasetError(f"{reference!r}: Energon reads remote aux sources as msc:// URLs")
    if source is not None and is_msc(source) and not target.startswith(("/", "~")):
        return kind, join_url(parent_url(str(source)), target)
    local = Path(target).expanduser()
    if not local.is_absolute() and source is not None:
        local = Path(source).parent / local
    return kind, local


def aux_source_problem(reference: str, source: "Path | str | None") -> str | None:
    """Why the aux ``reference`` of the metadataset ``source`` cannot be read (``None``: it can)."""
    try:
        kind, target = resolve_aux(reference, source)
        if kind == "dataset":
            index = (
                join_url(str(target), META_DIR, INDEX_FILE)
                if is_msc(target)
                else str(Path(target) / META_DIR / INDEX_FILE)
            )
            there = is_file(index, f"{META_DIR}/{INDEX_FILE}") if is_msc(index) else Path(index).is_file()
            if not there:
                return (
                    f"{target} is not a prepared Energon dataset (no {META_DIR}/{INDEX_FILE}); "
                    "a folder of media files is named filesystem://PATH (or filesystem+msc://...)"
                )
            return None
        if is_msc(target):
            if not first_names(str(target), limit=1):
                return f"nothing is stored under {target}"
        elif not Path(target).is_dir():
            return f"the folder {str(target)!r} does not exist"
    except DatasetError as exc:
        return str(exc)
    return None


def _cooker_takes(cooker: Any, names: list[str]) -> list[str]:
    """The ``names`` the cooker's ``cook`` takes no keyword argument for."""
    try:
        parameters = inspect.signature(cooker.cook).parameters.values()
    except (TypeError, ValueError):
        return []  # not inspectable: not checked
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    taken = {p.name for p in parameters if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    return [name for name in names if name not in taken]


def aux_problems(encoder: Any, part: Any, where: str) -> list[str]:
    """Why the aux sources of ``part`` (a :class:`~energon_plugins.config.dataset_fit.DatasetPart`)
    cannot be read by ``encoder`` (empty: they can, or there are none)."""
    aux: Mapping[str, str] = part.aux
    if not aux:
        return []
    names = sorted(aux)
    if not part.crude:
        return [
            f"{where} declares aux sources ({', '.join(names)}), but Energon reads aux sources only "
            f"for crude datasets, cooked by the task encoder; this one holds {part.cls} samples"
        ]
    problems = []
    for name in names:
        problem = aux_source_problem(aux[name], part.source)
        if problem is not None:
            problems.append(f"{where}: its aux source {name!r} ({aux[name]}): {problem}")
    for cooker in getattr(encoder, "cookers", None) or ():
        match = getattr(cooker, "is_match", None)
        if callable(match) and not match(dict(part.subflavors)):
            continue
        missing = _cooker_takes(cooker, names)
        if missing:
            cook = getattr(cooker.cook, "__name__", "cook")
            problems.append(
                f"{where} declares aux sources {', '.join(names)}, but the cooker {cook} of "
                f"{type(encoder).__name__} takes no keyword argument {', '.join(missing)}; Energon "
                "hands each aux source to the cooker under its name"
            )
        break  # Energon cooks with the first matching cooker
    return problems
