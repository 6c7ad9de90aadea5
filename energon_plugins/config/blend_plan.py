"""Token-aware blend weights: the sample weights that give requested shares of tokens.

Energon reads a blend's ``weight`` as a share of *samples*; a recipe asks for shares of
*tokens* ("40% of the tokens from OCR"). With ``m_i`` the mean tokens per sample of entry
``i`` and ``t_i`` its requested token share, sampling entry ``i`` with weight ``t_i / m_i``
gives it, in expectation, ``t_i`` of the tokens. This module holds what needs no loader: the
top-level entries of a blend (:func:`blend_entries`), the weights (:func:`planned_weights`)
and the metadataset written with them (:func:`write_planned`); ``energon-plugins blend plan``
measures ``m_i`` with the task encoder (:mod:`energon_plugins.loading.token_means`).

Only the weights of the split's top-level ``blend`` change: an entry that is itself a
metadataset keeps its own (sample) weights inside and is measured as one unit. Every other
key, split and nested file is kept; ``path:`` values relative to the source are rewritten so
they still point at the same datasets from the new file's folder.
"""

from __future__ import annotations

import dataclasses
import math
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.blend_walk import read_metadataset, resolve_path, walk_split
from energon_plugins.config.remote_storage import is_msc
from energon_plugins.config.settings import ConfigIssue
from energon_plugins.errors import ConfigError, DatasetError


@dataclasses.dataclass(frozen=True)
class BlendEntry:
    """One entry of a split's top-level blend.

    Attributes:
        index: its position in the ``blend`` list.
        path: its ``path`` as the YAML writes it (the name ``--share`` and the tables use).
        weight: its ``weight`` (1.0 where the YAML gives none, as in Energon).
        sources: the source names (``stats()`` keys) of the datasets it reads: itself, or
            the leaves of the metadataset it names.
    """

    index: int
    path: str
    weight: float
    sources: tuple[str, ...]


def blend_entries(path: str | Path, split: str = "train") -> list[BlendEntry]:
    """The top-level ``blend`` entries of ``split`` of the metadataset ``path``.

    Raises:
        DatasetError: the file cannot be read, or the split is not a ``blend`` of ``path:``
            entries with usable weights (the message names the place).
    """
    source: Path | str = str(path) if is_msc(path) else Path(path).expanduser().resolve()
    name = str(source).rsplit("/", 1)[-1]
    data = read_metadataset(source)
    splits = data.get("splits") if isinstance(data, Mapping) else None
    node = splits.get(split) if isinstance(splits, Mapping) else None
    place = f"{name}: splits.{split}"
    if not isinstance(node, Mapping) or not isinstance(node.get("blend"), list):
        kind = "missing" if node is None else f"not a blend ({', '.join(map(str, node)) or 'empty'})"
        if isinstance(node, Mapping) and "blend_epochized" in node:
            kind = "a blend_epochized (repetitions count samples; plan a weighted blend)"
        raise DatasetError(f"{place}: {kind}; blend plan needs a `blend:` list of weighted entries")
    walk = walk_split(source, split)
    if walk.problems:
        raise DatasetError("; ".join(walk.problems))
    entries = []
    for index, entry in enumerate(node["blend"]):
        at = f"{place}.blend[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
            raise DatasetError(f"{at}: blend plan plans entries with a `path:` (a join cannot be planned)")
        weight = entry.get("weight", 1.0)
        prefix = f"{at} -> "
        sources = tuple(
            dict.fromkeys(
                leaf.written for leaf in walk.leaves if leaf.place == at or leaf.place.startswith(prefix)
            )
        )
        entries.append(BlendEntry(index, entry["path"], float(weight), sources))
    written = [e.path for e in entries]
    twice = sorted({p for p in written if written.count(p) > 1})
    if twice:
        raise DatasetError(f"{place}: {', '.join(twice)} listed twice; give each dataset one entry")
    return entries


def requested_shares(entries: list[BlendEntry], shares: Mapping[str, float] | None) -> dict[str, float]:
    """The token share per entry path, summing to 1: ``shares`` (every entry named, values
    any positive numbers) or, without them, the blend's own weights read as token shares.

    Raises:
        ConfigError: ``shares`` names an entry the blend lacks, leaves one out, or holds a
            share that is not a positive finite number.
    """
    paths = [e.path for e in entries]
    if not shares:
        raw = {e.path: e.weight for e in entries}
    else:
        unknown = [p for p in shares if p not in paths]
        if unknown:
            raise ConfigError(
                f"share: no blend entry {', '.join(map(repr, unknown))}; entries: {', '.join(paths)}"
            )
        missing = [p for p in paths if p not in shares]
        if missing:
            raise ConfigError(f"share: give every entry a share; missing: {', '.join(missing)}")
        raw = dict(shares)
    for entry_path, value in raw.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ConfigError(f"share: {entry_path}: {value!r} is not a positive number")
    total = sum(raw.values())
    return {p: raw[p] / total for p in paths}


def planned_weights(shares: Mapping[str, float], mean_tokens: Mapping[str, float]) -> dict[str, float]:
    """Sample weights (summing to 1, 6 significant digits) that give ``shares`` of the tokens
    when entry ``p`` averages ``mean_tokens[p]`` tokens per sample.

    Raises:
        ConfigError: an entry has no measured tokens (its mean is 0 or missing).
    """
    empty = [p for p in shares if not mean_tokens.get(p)]
    if empty:
        raise ConfigError(
            f"blend plan: no tokens measured for {', '.join(empty)}; a share of tokens needs tokens"
        )
    raw = {p: share / mean_tokens[p] for p, share in shares.items()}
    total = sum(raw.values())
    return {p: float(f"{value / total:.6g}") for p, value in raw.items()}


def _rebased(value: str, source: Path | str, out_dir: Path) -> str:
    """``value`` (a ``path:`` of ``source``) written so it points at the same place from ``out_dir``."""
    if is_msc(value) or "://" in value or value.startswith(("/", "~")):
        return value
    target = resolve_path(value, source)
    if target is None or is_msc(target):
        return str(target) if target is not None else value
    if Path(source).parent == out_dir:
        return value
    return os.path.relpath(target, out_dir)


def _rebase_paths(node: Any, source: Path | str, out_dir: Path) -> Any:
    if isinstance(node, Mapping):
        return {
            key: _rebased(value, source, out_dir)
            if key == "path" and isinstance(value, str)
            else _rebase_paths(value, source, out_dir)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_rebase_paths(item, source, out_dir) for item in node]
    return node


def write_planned(
    path: str | Path, out: str | Path, weights: Mapping[str, float], split: str = "train", header: str = ""
) -> Path:
    """Write the metadataset ``path`` to ``out`` with ``weights`` (entry path -> weight) in the
    top-level blend of ``split``; every other key kept, relative paths rebased to ``out``'s
    folder. ``header``: comment lines put first. Returns ``out``.

    Raises:
        ConfigError: ``out`` is the source file itself (a plan never overwrites its input).
    """
    source: Path | str = str(path) if is_msc(path) else Path(path).expanduser().resolve()
    target = Path(out).expanduser().resolve()
    if not is_msc(source) and target == source:
        raise ConfigError(f"output: {out} is the metadataset being planned; write the plan to another file")
    data = read_metadataset(source)
    planned = _rebase_paths(data, source, target.parent)
    for original, entry in zip(
        data["splits"][split]["blend"], planned["splits"][split]["blend"], strict=True
    ):
        entry["weight"] = weights[original["path"]]
    text = yaml.safe_dump(planned, sort_keys=False, default_flow_style=False)
    lines = [wrapped for line in header.splitlines() for wrapped in textwrap.wrap(line, 96) or [""]]
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in lines)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(comment + text, encoding="utf-8")
    return target


def schedule_issues(path: str | Path, stages: Any) -> list[ConfigIssue]:
    """What is wrong with ``blend_schedule`` (already valid in shape) for the training blend of
    the metadataset ``path``: one issue per stage that names an entry the blend lacks or leaves
    one out, or one for a dataset that is not a weighted blend."""
    if not stages:
        return []
    from energon_plugins.config.schedule import BlendStage

    if not str(path).endswith((".yaml", ".yml")):
        return [ConfigIssue("blend_schedule", f"{path} is one dataset, not a metadataset blend")]
    try:
        paths = [entry.path for entry in blend_entries(path)]
    except DatasetError as exc:
        return [ConfigIssue("blend_schedule", str(exc))]
    issues = []
    for index, raw in enumerate(stages):
        stage = raw if isinstance(raw, BlendStage) else BlendStage.model_validate(raw)
        unknown = [repr(name) for name in stage.weights if name not in paths]
        missing = [name for name in paths if name not in stage.weights]
        where = f"blend_schedule[{index}].weights"
        if unknown:
            issues.append(
                ConfigIssue(where, f"no blend entry {', '.join(unknown)} (entries: {', '.join(paths)})")
            )
        if missing:
            issues.append(ConfigIssue(where, f"give every entry a weight; missing: {', '.join(missing)}"))
    return issues


def schedule_stages(path: str | Path, stages: Any) -> tuple[tuple[int, dict[str, float]], ...]:
    """``blend_schedule`` (valid in shape) as ``(at, {entry path: weight})`` pairs in the
    blend's entry order, checked against the training blend of the metadataset ``path``
    (``()`` for ``None``).

    Raises:
        ConfigError: :func:`schedule_issues` found a problem (all of them named).
    """
    issues = schedule_issues(path, stages)
    if issues:
        raise ConfigError("; ".join(map(str, issues)))
    if not stages:
        return ()
    from energon_plugins.config.schedule import BlendStage

    checked = [s if isinstance(s, BlendStage) else BlendStage.model_validate(s) for s in stages]
    order = [entry.path for entry in blend_entries(path)]
    return tuple((stage.at, {name: float(stage.weights[name]) for name in order}) for stage in checked)
