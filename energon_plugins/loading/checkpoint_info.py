"""What a checkpoint's rank files hold, for ``energon-plugins checkpoint info``.

:func:`describe_checkpoint` reads every rank file of a checkpoint folder, local or ``msc://``
(:mod:`energon_plugins.loading.rank_files`), and returns plain JSON values; a file that cannot be
read, or a set that does not add up, is reported as the ``problem`` instead of raised, so the
rest can still be shown.
"""

import os
from typing import Any

from energon_plugins.loading.checkpoint import StateFileError, StateMismatchError
from energon_plugins.loading.elastic import layout_of, partition_states
from energon_plugins.loading.rank_files import find_rank_files, no_files_message, read_rank_file, set_problem
from energon_plugins.loading.state_store import exists


def describe_checkpoint(folder: str | os.PathLike) -> dict[str, Any]:
    """What ``folder``'s rank files hold, as plain JSON values: where they are, the layout that
    saved them (ranks, workers, data partitions P, virtual workers V), seed, dataset identity,
    state format, and per rank its workers, partitions, batches consumed per partition (where
    known) and samples skipped by reason; ``complete`` with the ``problem`` when it is False.

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        StateFileError: no rank files there (a file that cannot be read is a ``problem``).
    """

    location = find_rank_files(folder)
    if not location.paths:
        if not exists(location.folder):
            raise FileNotFoundError(no_files_message(location.folder))
        raise StateFileError(no_files_message(location.folder))
    count = len(location.paths)
    read: dict[int, tuple[Any, dict[str, Any] | None, int | None]] = {}
    problems = []
    for rank, path in sorted(location.paths.items()):
        try:
            read[rank] = read_rank_file(path)
        except StateFileError as exc:
            problems.append(str(exc))
    consumed: dict[int, int] = {}
    if not problems:
        states = [read[rank][0] for rank in sorted(read)]
        problem = set_problem(location, states, [read[rank][1] for rank in sorted(read)])
        if problem is None:
            try:
                _, partitions, _, _ = partition_states(states, None)
                consumed = {p: int(s["sample_index"]) + int(s["skip"]) for p, s in partitions.items()}
            except StateMismatchError as exc:
                problem = f"{location.folder}: {exc}"
        problems += [problem] if problem else []
    rows, layouts = [], []
    for rank, path in sorted(location.paths.items()):
        if rank not in read:
            rows.append(
                {"rank": rank, "file": path.name, "error": next(p for p in problems if str(path) in p)}
            )
            continue
        state, fingerprint, version = read[rank]
        try:
            layout = layout_of(state, rank, count)
        except (KeyError, TypeError, ValueError):
            rows.append({"rank": rank, "file": path.name, "error": "no readable layout"})
            continue
        layouts.append((layout, fingerprint, version))
        owned = layout.owned() if layout.dp_size * max(layout.num_workers, 1) <= layout.partitions else []
        positions = state.get("positions") if isinstance(state, dict) else None
        known = consumed or {int(p): int(i) + 1 for p, i in (positions or {}).items()}
        counts = (state.get("skip_counts") if isinstance(state, dict) else None) or {}
        skipped: dict[str, int] = {}
        for per_reason in counts.values():
            for reason, number in dict(per_reason).items():
                skipped[str(reason)] = skipped.get(str(reason), 0) + int(number)
        rows.append(
            {
                "rank": rank,
                "file": path.name,
                "format": version,
                "workers": layout.num_workers,
                "partitions": owned,
                "consumed": {str(p): known[p] for p in owned if p in known} or None,
                "skipped": skipped,
            }
        )
    first, fingerprint, _ = layouts[0] if layouts else (None, None, None)
    fingerprint = fingerprint or {}
    formats = {row["format"] for row in rows if "format" in row}
    return {
        "folder": str(location.folder),
        "origin": location.origin,
        "iteration": location.iteration,
        "ranks": count,
        "dp_size": first.dp_size if first else None,
        "workers": first.num_workers if first else None,
        "partitions": first.partitions if first else None,
        "virtual_workers": first.virtual_workers if first else None,
        "partitioned": first.partitioned if first else None,
        "seed": fingerprint.get("seed", 0 if fingerprint else None),
        "dataset": fingerprint.get("dataset"),
        "format": formats.pop() if len(formats) == 1 else "mixed",
        "complete": not problems,
        "problem": problems[0] if problems else None,
        "rank_files": rows,
    }
