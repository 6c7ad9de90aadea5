"""Finding and reading every data-parallel rank's loader-state file of a checkpoint.

A checkpoint folder is one of:

- a folder of ``train_dataloader_dprank{NNN}.pt`` files, as ``save_checkpoint`` writes it (or
  an ``iter_NNNNNNN`` folder of Megatron-Bridge's holding them);
- a Megatron-Bridge checkpoint root: its tracker (``latest_train_state.pt``, else Megatron-LM's
  ``latest_checkpointed_iteration.txt``) names the iteration, whose loader states Bridge writes
  to ``ROOT/energon/iter_NNNNNNN/`` (its default ``dataset.dataloader_save``; a run that set
  ``dataloader_save`` to the root itself has them in ``ROOT/iter_NNNNNNN/``);
- a model iteration folder ``ROOT/iter_NNNNNNN`` (its states are in ``ROOT/energon/`` beside it),
  or a loader-state root (``ROOT/energon``) holding one iteration.

Each may be local or on an object store (``msc://PROFILE/bucket/...``): every listing and read
goes through :mod:`~energon_plugins.loading.state_store`.

:func:`read_rank_states` reads every file through the restricted unpickler and refuses a set
that does not add up, naming the file: a rank missing, a file holding another rank's state, files
of different runs. Nothing here imports torch before a file is read.
"""

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from energon_plugins.loading.checkpoint import (
    BRIDGE_STATE_KEY,
    STATE_FILE,
    STATE_KEY,
    StateFileError,
    StateMismatchError,
    fingerprint_differences,
    mismatch_message,
    read_payload,
    restore_named,
    state_path,
)
from energon_plugins.loading.elastic import LAYOUT_KEYS, layout_of, only_layout_differs
from energon_plugins.loading.state_store import (
    ObjectTooLargeError,
    StatePath,
    exists,
    is_dir,
    is_file,
    location,
    matching_names,
    read_bytes,
)

BRIDGE_STATE_SUBDIR = "energon"
"""The folder of a Megatron-Bridge checkpoint root its loader states go to by default."""
BRIDGE_TRACKERS = ("latest_train_state.pt", "latest_checkpointed_iteration.txt")
"""Megatron-Bridge's tracker files, in the order Bridge reads them."""
ITERATION_FOLDER = "iter_{iteration:07d}"
RELEASE_FOLDER = "release"
_ITERATION_NAME = re.compile(r"iter_(\d{7,})")
_RANK_FILE_NAME = re.compile(r"train_dataloader_dprank(\d+)\.pt")
_RANK_FILE_GLOB = "train_dataloader_dprank*.pt"
_SIZE_KEYS = ("dp_world_size", "num_workers")
MAX_TRACKER_BYTES = 4096
"""Largest ``latest_checkpointed_iteration.txt`` read (it holds an iteration number)."""


@dataclasses.dataclass(frozen=True)
class RankFolder:
    """Where a checkpoint's rank files are: ``folder`` holds ``paths`` (DP rank -> file)."""

    folder: StatePath
    paths: dict[int, StatePath]
    origin: str = "folder"
    """``folder`` (of save_checkpoint's files) or ``megatron-bridge`` (resolved from a root)."""
    iteration: int | str | None = None
    """The Megatron-Bridge iteration (``"release"`` for a release checkpoint), else None."""

    @property
    def subfolder(self) -> str | None:
        """The iteration folder's name (``iter_0000100``) when the files are in one, else None."""
        name = self.folder.name
        return name if _ITERATION_NAME.fullmatch(name) or name == RELEASE_FOLDER else None

    def present(self) -> str:
        """The file names there, for a message."""
        return ", ".join(path.name for _, path in sorted(self.paths.items())) or "none"


@dataclasses.dataclass(frozen=True)
class RankStates:
    """Every rank's state of a checkpoint (index = DP rank), read and checked."""

    location: RankFolder
    paths: list[StatePath]
    states: list[Any]
    fingerprints: list[dict[str, Any] | None]
    """Each file's fingerprint (the file's own, else the one inside its state; None: none)."""
    formats: list[int | None]
    """Each file's ``format`` (None: written by Megatron-Bridge, which records none)."""


def _rank_paths(folder: StatePath) -> dict[int, StatePath]:
    """The rank files directly in ``folder`` (none when it does not exist).

    Raises:
        StateMismatchError: a file named like a rank file but not as one (``dprank1.pt`` beside
            ``dprank001.pt`` would be a second file of rank 1).
    """
    found: dict[int, StatePath] = {}
    for name in matching_names(folder, _RANK_FILE_GLOB):
        path = folder / name
        match = _RANK_FILE_NAME.fullmatch(path.name)
        rank = int(match.group(1)) if match else None
        if rank is None or path.name != STATE_FILE.format(rank=rank):
            expected = "" if rank is None else f" (rank {rank}'s is {STATE_FILE.format(rank=rank)})"
            raise StateMismatchError(
                f"{path} is named like a loader state file but not as one{expected}: rename or remove it"
            )
        found[rank] = path
    return found


def tracker_iteration(root: StatePath) -> tuple[int | str, StatePath] | None:
    """``(iteration, tracker file)`` a Megatron-Bridge checkpoint root's tracker names, or None.

    Raises:
        StateFileError: the tracker is unreadable or names no iteration.
    """
    for name in BRIDGE_TRACKERS:
        tracker = root / name
        if not is_file(tracker):
            continue
        if name.endswith(".txt"):
            try:
                text = read_bytes(tracker, MAX_TRACKER_BYTES).decode("utf-8", errors="replace").strip()
            except ObjectTooLargeError as exc:
                raise StateFileError(f"{tracker} names no iteration (it is {exc.size:,} bytes)") from exc
            if text == RELEASE_FOLDER:
                return RELEASE_FOLDER, tracker
            if text.isdigit():
                return int(text), tracker
            raise StateFileError(f"{tracker} names no iteration (it holds {text[:40]!r})")
        from energon_plugins.loading.safe_load import load_state_file

        step = load_state_file(tracker)
        step = step.get("step") if isinstance(step, dict) else None
        try:
            return int(step), tracker  # type: ignore[arg-type]  # a 0-d tensor or an int
        except (TypeError, ValueError, RuntimeError) as exc:
            raise StateFileError(f"{tracker} holds no 'step' (Megatron-Bridge's train state)") from exc
    return None


def iteration_folder(iteration: int | str) -> str:
    """``iter_0000100`` (or ``release``): where Bridge writes an iteration's files."""
    return RELEASE_FOLDER if iteration == RELEASE_FOLDER else ITERATION_FOLDER.format(iteration=iteration)


def find_rank_files(folder: str | os.PathLike) -> RankFolder:
    """Where ``folder``'s rank files are (see the module docstring); reads no state file.

    A folder with none (or one that does not exist) gives a :class:`RankFolder` without paths.

    Raises:
        StateFileError: a Bridge tracker names an iteration whose folder holds no rank files,
            or several iterations are present and no tracker names one.
        StateMismatchError: a file is named like a rank file but not as one.
    """
    root = location(folder)
    if not is_dir(root):
        return RankFolder(root, {})
    paths = _rank_paths(root)
    if paths:
        return RankFolder(root, paths)
    for tracker_root in (root, root.parent) if root.name == BRIDGE_STATE_SUBDIR else (root,):
        named = tracker_iteration(tracker_root)
        if named is None:
            continue
        iteration, tracker = named
        name = iteration_folder(iteration)
        candidates = [tracker_root / BRIDGE_STATE_SUBDIR / name, tracker_root / name]
        for candidate in candidates:
            found = _rank_paths(candidate)
            if found:
                return RankFolder(candidate, found, "megatron-bridge", iteration)
        raise StateFileError(
            f"{tracker} names iteration {iteration}, but no loader state files ({_RANK_FILE_GLOB}) are in "
            f"{candidates[0]} or {candidates[1]}: that checkpoint holds no loader state"
        )
    if _ITERATION_NAME.fullmatch(root.name) or root.name == RELEASE_FOLDER:
        sibling = root.parent / BRIDGE_STATE_SUBDIR / root.name
        found = _rank_paths(sibling)
        if found:
            return RankFolder(sibling, found, "megatron-bridge", _iteration_of(root.name))
    holders = []
    for base in (root, root / BRIDGE_STATE_SUBDIR):
        for name in matching_names(base, "*", folders=True):  # iter_NNNNNNN before release
            if _ITERATION_NAME.fullmatch(name) or name == RELEASE_FOLDER:
                found = _rank_paths(base / name)
                if found:
                    holders.append(RankFolder(base / name, found, "megatron-bridge", _iteration_of(name)))
    if len(holders) > 1:
        raise StateFileError(
            f"{root} holds the loader states of {len(holders)} iterations "
            f"({', '.join(h.folder.name for h in holders[:6])}) and no tracker file ({' / '.join(BRIDGE_TRACKERS)}) "
            f"names one: pass the iteration's folder, e.g. {holders[-1].folder}"
        )
    return holders[0] if holders else RankFolder(root, {})


def _iteration_of(name: str) -> int | str:
    return RELEASE_FOLDER if name == RELEASE_FOLDER else int(name.split("_", 1)[1])


def no_files_message(folder: str | os.PathLike) -> str:
    """Why ``folder`` gives no rank files."""
    if not exists(location(folder)):
        return f"{folder} does not exist"
    return (
        f"no loader state files ({_RANK_FILE_GLOB}) in {folder}: expected a folder written by "
        "save_checkpoint, a Megatron-Bridge checkpoint (with latest_train_state.pt or "
        "latest_checkpointed_iteration.txt) or one of its iter_NNNNNNN folders"
    )


def read_rank_file(path: StatePath) -> tuple[Any, dict[str, Any] | None, int | None]:
    """``(state, fingerprint, format)`` of one rank file, read with the restricted unpickler.

    Raises:
        StateFileError: unreadable, corrupt, foreign, or not a loader state (names the file).
    """
    payload, state, fingerprint = read_payload(path)
    if not _is_loader_state(state):
        raise StateFileError(
            f"{str(path)!r} holds no loader state (a {type(state).__name__}; expected what "
            "save_state() returns or Energon's save_state_rank())"
        )
    if fingerprint is None and isinstance(state, dict) and isinstance(state.get("fingerprint"), dict):
        fingerprint = dict(state["fingerprint"])
    version = payload.get("format", 1 if BRIDGE_STATE_KEY not in payload else None)
    return state, fingerprint, version


def _is_loader_state(state: Any) -> bool:
    from megatron.energon.savable_loader import SavableDataLoaderState

    return isinstance(state, SavableDataLoaderState) or (isinstance(state, dict) and STATE_KEY in state)


def saved_size(state: Any, fingerprint: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """``(DP ranks, workers per rank)`` that saved ``state``, as its layout or fingerprint
    records them (None: it records neither, e.g. Energon's bare state)."""
    layout = state.get("layout") if isinstance(state, dict) else None
    try:
        if isinstance(layout, Mapping):
            return int(layout["dp_size"]), int(layout["num_workers"])
        if isinstance(fingerprint, Mapping) and all(key in fingerprint for key in _SIZE_KEYS):
            return int(fingerprint["dp_world_size"]), int(fingerprint["num_workers"])
    except (KeyError, TypeError, ValueError):
        return None
    return None


def set_problem(
    location: RankFolder, states: list[Any], fingerprints: list[dict[str, Any] | None]
) -> str | None:
    """Why the states of ``location.paths`` (read, in rank order) are not one run's complete set
    (None: they are). Checks names and layouts, not the partitions (see ``partition_states``)."""

    ranks = sorted(location.paths)
    missing = sorted(set(range(ranks[-1] + 1)) - set(ranks))
    if missing:
        return (
            f"no loader state for DP rank {missing[0]}: {state_path(location.folder, missing[0])} is missing "
            f"(present: {location.present()})"
        )
    paths = [location.paths[rank] for rank in ranks]
    try:
        layouts = [layout_of(state, index, len(states)) for index, state in enumerate(states)]
    except (KeyError, TypeError, ValueError) as exc:
        return f"a loader state in {location.folder} records no readable layout ({type(exc).__name__}: {exc})"
    first = layouts[0]
    for index, layout in enumerate(layouts):
        if layout.dp_rank != index:
            return (
                f"{paths[index]} holds DP rank {layout.dp_rank}'s state, not rank {index}'s "
                f"(a copy of {state_path(location.folder, layout.dp_rank).name}?)"
            )
        if not layout.same_split(first):
            return (
                f"{paths[index]} was saved by {layout.describe()}, {paths[0].name} by {first.describe()}: "
                "the files come from different runs"
            )
    if first.dp_size != len(states):
        if first.dp_size > len(states):
            absent = ", ".join(STATE_FILE.format(rank=r) for r in range(len(states), first.dp_size)[:4])
            return (
                f"{paths[0]} was saved by a run of {first.dp_size} DP ranks, but {location.folder} holds "
                f"{len(states)} state files: {absent} missing"
            )
        return (
            f"{paths[0]} was saved by a run of {first.dp_size} DP ranks, but {location.folder} holds "
            f"{len(states)} state files ({paths[first.dp_size].name} and on are of another run)"
        )
    base = fingerprints[0]
    for index, fingerprint in enumerate(fingerprints):
        if base is None or fingerprint is None:
            continue
        differences = fingerprint_differences(
            {k: v for k, v in base.items() if k not in LAYOUT_KEYS},
            {k: v for k, v in fingerprint.items() if k not in LAYOUT_KEYS},
        )
        if differences:
            return (
                f"{paths[index]} and {paths[0].name} were saved by different runs. Differences (saved: "
                f"{paths[0].name}, now: {paths[index].name}): " + "; ".join(differences)
            )
    return None


def read_rank_states(folder: str | os.PathLike | RankFolder) -> RankStates:
    """Every rank's state of ``folder`` (see the module docstring), index = DP rank.

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        StateFileError: no rank files there, or a file is unreadable, corrupt or not a loader
            state; the message names the file.
        StateMismatchError: a rank is missing, a file holds another rank's state, or the files
            come from different runs; the message names the file.
    """
    location = folder if isinstance(folder, RankFolder) else find_rank_files(folder)
    if not location.paths:
        if not exists(location.folder):
            raise FileNotFoundError(no_files_message(location.folder))
        raise StateFileError(no_files_message(location.folder))
    paths = [path for _, path in sorted(location.paths.items())]
    states, fingerprints, formats = [], [], []
    for path in paths:
        state, fingerprint, version = read_rank_file(path)
        states.append(state)
        fingerprints.append(fingerprint)
        formats.append(version)
    problem = set_problem(location, states, fingerprints)
    if problem is not None:
        raise StateMismatchError(problem)
    return RankStates(location, paths, states, fingerprints, formats)


def restore_every_rank(
    datamodule: Any, location: RankFolder, rank: int, fingerprint: Mapping[str, Any]
) -> None:
    """Restore ``datamodule``'s training loader (rank ``rank``, its ``fingerprint``) from its share
    of every rank's file in ``location``, saved by another number of ranks or workers.

    Raises:
        StateFileError, StateMismatchError: as :func:`read_rank_states`; also when the files were
            saved by another setup (each differing key named, with the file) or cannot feed this
            run's ranks x workers (the message names the folder and the layouts).
    """
    ranks = read_rank_states(location)
    current = {k: v for k, v in fingerprint.items() if k != "dp_rank"}
    layout_differences: list[str] = []
    for path, saved in zip(ranks.paths, ranks.fingerprints, strict=True):
        if saved is None:
            continue
        differences = fingerprint_differences({k: v for k, v in saved.items() if k != "dp_rank"}, current)
        if not only_layout_differs(differences):
            raise StateMismatchError(mismatch_message(str(path), differences))
        layout_differences = differences
        break
    try:
        restore_named(datamodule.train_dataloader(), list(ranks.states), str(location.folder))
    except StateMismatchError as exc:
        head = f"the loader states in {location.folder}"
        if rank not in location.paths:
            head = f"no loader state for DP rank {rank} in {location.folder} (present: {location.present()}), and {head}"
        why = f" ({'; '.join(layout_differences)})" if layout_differences else ""
        raise StateMismatchError(f"{head} cannot continue on this run{why}: {exc}") from exc
