"""Every leaf of a metadataset's split, with its place in the YAML, and the checks of a blend.

Energon blends what a split lists without asking whether it makes sense: the same dataset
reached twice (directly, or through two nested metadatasets) is loaded twice with the same
shuffle order, so its samples come twice in the same sequence (Energon issue #266); a weight of
0 drops a dataset silently, a negative or non-finite one breaks the sampling late; a leaf whose
split holds no samples fails inside a worker. :func:`walk_split` follows the metadataset tree
(nested ``.yaml`` leaves too, local or ``msc://``, with a guard against cycles and depth) and
yields each leaf with its place, e.g. ``outer.yaml: splits.train.blend[1] -> inner.yaml:
splits.train.blend[0]``; :func:`blend_problems` turns what it finds into one message per
problem, each naming the leaf and its place. Import-light: PyYAML only (no Energon).
"""

import dataclasses
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from energon_plugins.config.dataset_check import META_DIR, empty_split_reason
from energon_plugins.config.remote_storage import is_msc, join_url, parent_url
from energon_plugins.errors import DatasetError

MAX_NESTED_FILES = 16
"""Most metadataset files one chain of nested leaves may pass through (a deeper one is refused
as a probable cycle through differently spelled paths)."""

BLEND_KEYS = {"blend": "weight", "blend_epochized": "repetitions"}
"""The blend kinds of Energon's ``MetadatasetV2`` and the number each entry carries."""

JOINED = "join"
"""The ``blend_kind`` of a leaf that is a member of a join (read beside the others, not blended)."""


@dataclasses.dataclass(frozen=True)
class BlendLeaf:
    """One dataset a split reads: where it is listed (``place``), what it points to (``path``,
    resolved: a local folder or file, or an ``msc://`` URL; ``written``: as the YAML says) and
    what of it is read (``split_part``, the merged ``subflavors``, the ``subsets`` on the way)."""

    place: str
    path: "Path | str"
    written: str
    split_part: str
    subflavors: Mapping[str, Any]
    subsets: tuple[str, ...] = ()
    blend_kind: str | None = None
    """``blend`` or ``blend_epochized`` (the innermost blend the leaf is reached through),
    :data:`JOINED` for a member of a join, ``None`` when the split is the leaf alone."""
    share: float | None = None
    """The leaf's configured share of the split's samples when it is reached through weighted
    ``blend`` lists only: at each level its entry's ``weight`` over the sum of that list's
    weights, multiplied down nested blends (as Energon's ``MetadatasetBlend`` computes it);
    ``None`` otherwise (a join member, a ``blend_epochized``, the split alone, a bad weight)."""

    @property
    def identity(self) -> tuple[str, str, str, tuple[str, ...]]:
        """What makes two leaves the same stream of samples for Energon."""
        return (str(self.path), self.split_part, repr(sorted(self.subflavors.items())), self.subsets)

    @property
    def is_folder(self) -> bool:
        """Whether the leaf is a prepared folder (not a ``.jsonl`` file)."""
        return not str(self.path).endswith(".jsonl")


@dataclasses.dataclass
class SplitWalk:
    """The leaves of one split of a metadataset and the problems met on the way (bad weights,
    missing nested files, cycles)."""

    leaves: list[BlendLeaf] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)


def _name(source: "Path | str") -> str:
    return str(source).rstrip("/").rsplit("/", 1)[-1]


def read_metadataset(source: "Path | str") -> Any:
    """The parsed YAML of the metadataset file ``source`` (local or ``msc://``).

    Raises:
        DatasetError: it cannot be read or is not valid YAML (the file named).
    """
    if is_msc(source):
        from energon_plugins.config.remote_dataset import read_yaml

        return read_yaml(str(source), "the metadataset file")
    try:
        return yaml.safe_load(Path(source).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise DatasetError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from exc
    except OSError as exc:
        raise DatasetError(f"{source}: cannot read ({exc})") from exc


def resolve_path(raw: str, source: "Path | str") -> "Path | str | None":
    """Where ``raw`` (a ``path:`` of the metadataset ``source``) points, as Energon resolves it
    (relative to ``source``'s folder); ``None`` for a URL that is not ``msc://``."""
    if is_msc(raw):
        return raw.rstrip("/")
    if "://" in raw:
        return None
    if is_msc(source) and not raw.startswith(("/", "~")):
        return join_url(parent_url(str(source)), raw).rstrip("/")
    target = Path(raw).expanduser()
    target = target if target.is_absolute() else Path(source).parent / target
    return target.resolve()


def _is_metadataset(target: "Path | str") -> bool:
    return str(target).endswith((".yaml", ".yml"))


def _number_problem(value: Any, key: str) -> str | None:
    """Why ``value`` is not a usable ``weight`` / ``repetitions`` (``None``: it is)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{key} {value!r} is not a number"
    if not math.isfinite(value):
        return f"{key} {value!r} is not a finite number"
    if value <= 0:
        late = (
            " (Energon asserts it only inside a worker, when the first batch is read)"
            if key == "weight"
            else ""
        )
        drop = "; remove the entry to leave the dataset out" if value == 0 else ""
        return f"{key} {value!r} must be above 0{late}{drop}"
    return None


def _entry_shares(entries: list[Any]) -> list[float] | None:
    """Each entry's ``weight`` (1 where none is written, as in Energon) over their sum;
    ``None`` when one is not a number above 0."""
    weights: list[Any] = [
        entry.get("weight", 1.0) if isinstance(entry, Mapping) else None for entry in entries
    ]
    if any(_number_problem(weight, "weight") is not None for weight in weights):
        return None
    total = float(sum(weights))
    return [float(weight) / total for weight in weights]


class _Walker:
    """One walk of a split: the chain of open metadataset files guards against cycles."""

    def __init__(self, walk: SplitWalk) -> None:
        self.walk = walk
        self.chain: list[str] = []
        self.share: float | None = 1.0  # of the blend entry being walked (see BlendLeaf.share)

    def metadataset(
        self,
        source: "Path | str",
        split: str,
        prefix: str,
        subflavors: Mapping[str, Any],
        subsets: tuple,
        blend_kind: str | None = None,
    ) -> None:
        """The ``split`` of the metadataset file ``source`` (``prefix``: the place of the entry
        that names it, when nested)."""
        key = str(source)
        here = f"{prefix}{_name(source)}"
        if key in self.chain:
            self.walk.problems.append(
                f"{prefix.removesuffix(' -> ')}: the metadataset {source} includes itself"
            )
            return
        if len(self.chain) >= MAX_NESTED_FILES:
            self.walk.problems.append(f"{here}: metadatasets nested deeper than {MAX_NESTED_FILES} files")
            return
        data = read_metadataset(source)
        splits = data.get("splits") if isinstance(data, Mapping) else None
        if not isinstance(splits, Mapping) or split not in splits:
            have = ", ".join(map(str, splits)) if isinstance(splits, Mapping) else "none"
            self.walk.problems.append(
                f"{prefix.removesuffix(' -> ') or here}: the metadataset {source} has no {split!r} "
                f"split (it has: {have})"
            )
            return
        self.chain.append(key)
        try:
            self.node(
                splits[split], source, f"{here}: splits.{split}", split, subflavors, subsets, blend_kind
            )
        finally:
            self.chain.pop()

    def node(
        self,
        node: Any,
        source: "Path | str",
        place: str,
        split: str,
        subflavors: Mapping[str, Any],
        subsets: tuple,
        blend_kind: str | None,
    ) -> None:
        """A split's node: a blend, a join or a dataset reference."""
        if not isinstance(node, Mapping):
            return  # Energon's parser names a malformed node
        for kind, number in BLEND_KEYS.items():
            entries = node.get(kind)
            if isinstance(entries, list):
                subsets = (*subsets, repr(node["subset"])) if node.get("subset") is not None else subsets
                outer, shares = self.share, _entry_shares(entries) if kind == "blend" else None
                for index, entry in enumerate(entries):
                    self.share = None if shares is None or outer is None else shares[index] * outer
                    at = f"{place}.{kind}[{index}]"
                    if isinstance(entry, Mapping) and number in entry:
                        problem = _number_problem(entry[number], number)
                        if problem is not None:
                            leaf = entry.get("path", "a joined dataset")
                            self.walk.problems.append(f"{at} ({leaf}): {problem}")
                    self.node(entry, source, at, split, subflavors, subsets, kind)
                self.share = outer
                return
        join = node.get("join")
        if isinstance(join, (list, Mapping)):
            members = join.items() if isinstance(join, Mapping) else enumerate(join)
            for key, member in members:
                self.node(member, source, f"{place}.join[{key!r}]", split, subflavors, subsets, JOINED)
            return
        raw = node.get("path")
        if isinstance(raw, str):
            self.reference(node, raw, source, place, split, subflavors, subsets, blend_kind)

    def reference(
        self,
        node: Mapping[str, Any],
        raw: str,
        source: "Path | str",
        place: str,
        split: str,
        subflavors: Mapping[str, Any],
        subsets: tuple,
        blend_kind: str | None,
    ) -> None:
        """A ``path:`` entry: a dataset (a leaf) or a nested metadataset (walked)."""
        target = resolve_path(raw, source)
        if target is None:
            return  # a URL Energon opens itself
        if not is_msc(target) and not Path(target).exists():
            self.walk.problems.append(f"{place}: path {raw!r} does not exist ({target})")
            return
        own = node.get("subflavors")
        merged = {**(own if isinstance(own, Mapping) else {}), **subflavors}  # outer wins, as in Energon
        part = node.get("split_part")
        split_part = part if isinstance(part, str) and part else split
        if node.get("subset") is not None:
            subsets = (*subsets, repr(node["subset"]))
        if _is_metadataset(target):
            self.metadataset(target, split_part, f"{place} -> ", merged, subsets, blend_kind)
            return
        share = self.share if blend_kind == "blend" else None
        self.walk.leaves.append(BlendLeaf(place, target, raw, split_part, merged, subsets, blend_kind, share))


def walk_split(path: "str | Path", split: str) -> SplitWalk:
    """Every leaf of ``split`` of the metadataset ``path`` (local or ``msc://``), nested
    metadatasets followed, with the problems of the walk (bad weights or repetitions, a
    missing nested file or split, a cycle).

    Raises:
        DatasetError: a metadataset file on the way cannot be read.
    """
    walk = SplitWalk()
    source: Path | str = str(path).rstrip("/") if is_msc(path) else Path(path).expanduser().resolve()
    _Walker(walk).metadataset(source, split, "", {}, ())
    return walk


def _duplicate_problems(leaves: list[BlendLeaf], split: str) -> list[str]:
    by_identity: dict[tuple, list[BlendLeaf]] = {}
    for leaf in leaves:
        if leaf.blend_kind != JOINED:  # the members of a join are read side by side, not blended
            by_identity.setdefault(leaf.identity, []).append(leaf)
    problems = []
    for same in by_identity.values():
        if len(same) < 2:
            continue
        first = same[0]
        number = BLEND_KEYS.get(first.blend_kind or "blend", "weight")
        places = " and at ".join(leaf.place for leaf in same)
        problems.append(
            f"{first.path} (split {first.split_part!r}) is blended {len(same)} times into the "
            f"{split!r} split: at {places}; Energon would read it {len(same)} times with the same "
            f"order (the same samples in the same sequence, silently duplicated): list it once "
            f"and give that entry a higher {number} instead"
        )
    return problems


def _leaf_sample_problem(leaf: BlendLeaf) -> str | None:
    """Why ``leaf`` (a prepared folder) gives no samples (``None``: it gives some, or it cannot
    be told without Energon)."""
    if not leaf.is_folder:
        return None
    if is_msc(leaf.path):
        from energon_plugins.config.remote_storage import read_text

        url = str(leaf.path)
        split_text = read_text(join_url(url, META_DIR, "split.yaml"), f"{META_DIR}/split.yaml", shown=url)
        index_text = read_text(join_url(url, META_DIR, ".info.json"), f"{META_DIR}/.info.json", shown=url)
    else:
        meta = Path(leaf.path) / META_DIR
        if not meta.is_dir():
            return f"{leaf.place}: {leaf.path} is not a prepared Energon dataset (no {META_DIR})"
        split_file, index_file = meta / "split.yaml", meta / ".info.json"
        split_text = split_file.read_text(encoding="utf-8") if split_file.is_file() else None
        index_text = index_file.read_text(encoding="utf-8") if index_file.is_file() else None
    reason = empty_split_reason(split_text, index_text, leaf.split_part)
    if reason is None:
        return None
    return (
        f"{leaf.place}: empty leaf {leaf.path}: {reason}, so the blend gets no sample from it: "
        "remove the entry or prepare the dataset again"
    )


def blend_problems(path: "str | Path", splits: Iterable[str]) -> list[str]:
    """What is wrong with the blends of the metadataset ``path`` in ``splits`` (empty: nothing):
    a dataset reached twice in one split, an empty leaf, a weight or ``repetitions`` that is
    not a number above 0, a nested metadataset that is missing or includes itself. Each
    message names the leaf and its place in the YAML files.

    Raises:
        DatasetError: a metadataset file on the way cannot be read.
    """
    problems: list[str] = []
    for split in splits:
        walk = walk_split(path, split)
        problems += walk.problems
        problems += _duplicate_problems(walk.leaves, split)
        seen: set[tuple] = set()
        for leaf in walk.leaves:
            if leaf.identity in seen:
                continue
            seen.add(leaf.identity)
            problem = _leaf_sample_problem(leaf)
            if problem is not None:
                problems.append(problem)
    return list(dict.fromkeys(problems))


def leaf_places(path: "str | Path", split: str) -> dict[str, str]:
    """``{resolved leaf path: its place(s) in the YAML}`` of ``split`` of the metadataset
    ``path`` (empty when it cannot be walked): what a message about a leaf names it by."""
    try:
        leaves = walk_split(path, split).leaves
    except DatasetError:
        return {}
    places: dict[str, list[str]] = {}
    for leaf in leaves:
        places.setdefault(str(leaf.path), []).append(leaf.place)
    return {key: ", ".join(value) for key, value in places.items()}
