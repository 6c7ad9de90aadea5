"""Rewriting a checkpoint's loader states for another number of ranks or workers, offline.

:func:`redistribute` reads every old rank's file (:mod:`energon_plugins.loading.rank_files`),
computes every data partition's exact state (:func:`~energon_plugins.loading.elastic.partition_states`)
and writes one file per new rank, named as before, each restorable as that rank's *own* state by a
run of the new size (``load_checkpoint``, Megatron-Bridge's per-rank restore): ``{"energon": None,
"layout": ..., "positions": ..., "partition_states": ..., "skip_counts": ..., "fingerprint": ...}``,
the form ``save_state()`` returns after a restore from another layout, before the first batch.
No dataset is opened.

SRC and DST may each be local or on an object store (``msc://PROFILE/bucket/...``). The files are
first written to a local staging folder and read back as one complete set. A local DST then
appears whole or not at all (one rename). An object store has no rename of a folder: the files
are uploaded one by one, each in a single ``PUT`` (never part of a file), in rank order, and an
upload that fails removes the files it had stored. A reader that lists DST while the upload is
under way sees an incomplete set, which every reader here refuses (a rank missing).
"""

import contextlib
import dataclasses
import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from energon_plugins.loading.checkpoint import (
    STATE_KEY,
    StateFileError,
    StateMismatchError,
    state_path,
    state_payload,
)
from energon_plugins.loading.elastic import Layout, check_fits, partition_states, position_of
from energon_plugins.loading.rank_files import RankStates, read_rank_states
from energon_plugins.loading.state_store import (
    StatePath,
    delete,
    is_file,
    location,
    names,
    write_atomic,
)


class TooManyWorkersError(StateMismatchError):
    """The new ranks x workers exceed the old run's data partitions."""


@dataclasses.dataclass(frozen=True)
class Redistribution:
    """What :func:`redistribute` did: the old layout, the new one (rank 0's) and the files."""

    old: Layout
    new: Layout
    paths: list[StatePath]


def redistributed_states(
    ranks: RankStates, dp_size: int, num_workers: int | None = None
) -> tuple[Layout, list[tuple[dict[str, Any], dict[str, Any] | None]]]:
    """``(old layout, [(state, fingerprint) of each new rank])`` (index = new DP rank) for
    ``dp_size`` ranks of ``num_workers`` workers (default: the old run's).

    Raises:
        ValueError: ``dp_size`` < 1 or ``num_workers`` < 0.
        StateMismatchError: the states do not add up (see ``partition_states``).
        TooManyWorkersError: ``dp_size x max(num_workers, 1)`` exceeds the data partitions.
    """
    old, partitions, counts, sources = partition_states(ranks.states, None)
    workers = old.num_workers if num_workers is None else int(num_workers)
    if dp_size < 1 or workers < 0:
        raise ValueError(f"dp_size must be >= 1 and num_workers >= 0, got {dp_size} and {workers}")
    try:
        check_fits(old, dp_size, workers)
    except StateMismatchError as exc:
        raise TooManyWorkersError(str(exc)) from exc
    base = ranks.fingerprints[0]
    result = []
    for rank in range(dp_size):
        layout = Layout(old.partitions, old.virtual_workers, dp_size, rank, workers)
        owned = layout.owned()
        state: dict[str, Any] = {
            STATE_KEY: None,
            "layout": layout.as_dict(),
            "positions": {p: position_of(partitions[p]) for p in owned},
            "partition_states": {p: partitions[p] for p in owned},
            "skip_counts": {p: dict(counts[p]) for p in owned if p in counts},
            "source_stats": {p: sources[p] for p in owned if p in sources},
        }
        fingerprint = None
        if base is not None:
            fingerprint = {**base, "dp_rank": rank, "dp_world_size": dp_size, "num_workers": workers}
            state["fingerprint"] = dict(fingerprint)
        result.append((state, fingerprint))
    return old, result


def check_destination(dst: str | os.PathLike) -> StatePath:
    """``dst`` as a path, once it is known to be absent or an empty folder (on an object store:
    no object is at ``dst`` or under it).

    Raises:
        StateFileError: ``dst`` is a file or a folder that is not empty.
        StateStoreError: the object store cannot be asked.
    """
    path = location(dst)
    if not isinstance(path, Path):
        if is_file(path):
            raise StateFileError(f"{path} is not a folder: redistribute writes a new folder")
        if names(path):
            raise StateFileError(f"{path} is not empty: redistribute writes into a new or empty folder")
        return path
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise StateFileError(f"{path} is not a folder: redistribute writes a new folder")
    if path.is_dir() and any(path.iterdir()):
        raise StateFileError(f"{path} is not empty: redistribute writes into a new or empty folder")
    return path


def _write_staged(
    staging: Path,
    states: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
    subfolder: str | None,
) -> Path:
    """Write ``states`` as rank files into ``staging`` (``staging/subfolder`` when given) and read
    them back as one complete set; returns the folder holding them."""
    import torch

    folder = staging / subfolder if subfolder else staging
    folder.mkdir(exist_ok=True)
    for rank, (state, fingerprint) in enumerate(states):
        with open(state_path(folder, rank), "wb") as fh:
            torch.save(state_payload(dict(state), fingerprint), fh)
            fh.flush()
            os.fsync(fh.fileno())
    read_rank_states(folder)  # what was written reads back as one complete set
    return folder


def _upload(staged: Path, target: StatePath, count: int) -> None:
    """Store the ``count`` rank files of ``staged`` under the object-store folder ``target``, in
    rank order, each in one ``PUT``; on a failure, remove those already stored and re-raise."""
    stored: list[StatePath] = []
    try:
        for rank in range(count):
            path = state_path(target, rank)
            write_atomic(path, Path(state_path(staged, rank)).read_bytes())
            stored.append(path)
    except BaseException:
        for path in stored:
            with contextlib.suppress(OSError):  # unreachable store: readers refuse the incomplete set
                delete(path)
        raise


def write_rank_states(
    dst: str | os.PathLike,
    states: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
    subfolder: str | None = None,
) -> list[StatePath]:
    """Write ``states`` (index = DP rank) as rank files under ``dst`` (in ``dst/subfolder`` when
    given, as Megatron-Bridge's ``iter_NNNNNNN``): into a staging folder, read back and checked,
    then renamed to ``dst`` (local), or uploaded file by file (object store; see the module
    docstring).

    Raises:
        StateFileError: ``dst`` is not absent or empty (also when it filled meanwhile).
        StateStoreError: the object store refused an upload (the files stored are removed).
    """
    target = check_destination(dst)
    written = target / subfolder if subfolder else target
    if not isinstance(target, Path):  # an object store
        with tempfile.TemporaryDirectory(prefix="energon-redistribute-") as temporary:
            staged = _write_staged(Path(temporary), states, subfolder)
            check_destination(dst)  # still empty
            _upload(staged, written, len(states))
        return [state_path(written, rank) for rank in range(len(states))]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
    staging.mkdir()
    try:
        _write_staged(staging, states, subfolder)
        try:
            os.replace(staging, target)  # onto an absent or empty folder only
        except OSError as exc:
            raise StateFileError(
                f"{target} is not empty (it filled while writing): nothing was written"
            ) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [state_path(written, rank) for rank in range(len(states))]


def redistribute(
    src: str | os.PathLike, dst: str | os.PathLike, dp_size: int, num_workers: int | None = None
) -> Redistribution:
    """Rewrite the loader states of checkpoint ``src`` for ``dp_size`` ranks of ``num_workers``
    workers (default: the old run's) into the new or empty folder ``dst``; ``src`` is left as
    it is. Each may be local or an ``msc://`` URL. The files of an ``iter_NNNNNNN`` folder land in ``dst/iter_NNNNNNN/`` (so ``dst`` can
    be Megatron-Bridge's ``dataset.dataloader_load``).

    Raises:
        FileNotFoundError: ``src`` does not exist.
        StateFileError: ``dst`` is not empty, ``src`` holds no rank files, or a file is unreadable,
            corrupt or not a loader state (the message names it).
        StateMismatchError: a rank file is missing, holds another rank's state, or comes from
            another run.
        TooManyWorkersError: ``dp_size x max(num_workers, 1)`` exceeds the data partitions.
    """
    check_destination(dst)
    ranks = read_rank_states(src)
    old, states = redistributed_states(ranks, dp_size, num_workers)
    paths = write_rank_states(dst, states, ranks.location.subfolder)
    return Redistribution(old, Layout.from_saved(states[0][0]["layout"]), paths)
