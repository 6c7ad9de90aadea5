"""``convert --part K/N``: which records a part converts, where its number comes from, and a
finished part folder as ``convert merge`` reads it.

Part K of N converts the records whose position ``i`` in the source satisfies
``i % N == K - 1``. Every machine reads (scans) the whole source, which is cheap next to
loading and checking the media, and the parts are spread evenly through it whatever the
records hold. A part writes its accepted samples, keyed by their position as in a whole run,
into shards of its own folder, with its own report and ``convert.json`` (which says ``part:
{number, count}``, the settings and the source's fingerprint); it writes no Energon index.
``merge`` then copies the samples of all parts, in position order, into shards cut exactly as
one run cuts them. A part resumes like a whole run (``--resume`` with the same ``--part``).

Inside a Slurm job array (``sbatch --array=0-7``) the part defaults to the array task's:
``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_MIN`` (default 0), ``SLURM_ARRAY_TASK_STEP``
(default 1) and ``SLURM_ARRAY_TASK_COUNT`` give part ``(ID - MIN) / STEP + 1`` of ``COUNT``.

Every read of a part folder goes through :class:`PartFolder` (its state, its shards, its
report). A part folder on object storage (``msc://PROFILE/...``) is read in place: one listing
(the files' sizes), its ``convert.json``, then its shards and report as streams of ranged
reads (:meth:`~energon_plugins.convert.storage.RemoteFolder.stream`), nothing downloaded.
"""

import dataclasses
import heapq
import json
import pathlib
import re
import tarfile
from collections.abc import Iterator, Mapping
from typing import IO, Any

from energon_plugins.config.remote_urls import is_msc, join_url
from energon_plugins.convert.report import REPORT_NAME
from energon_plugins.convert.result import ConvertResult
from energon_plugins.convert.state import STATE_NAME, load_state, parse_state
from energon_plugins.convert.storage import RemoteFolder
from energon_plugins.errors import ConvertError

SLURM_ID = "SLURM_ARRAY_TASK_ID"
SLURM_COUNT = "SLURM_ARRAY_TASK_COUNT"
SLURM_MIN = "SLURM_ARRAY_TASK_MIN"
SLURM_STEP = "SLURM_ARRAY_TASK_STEP"
_PART = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")

Sample = tuple[int, str, list[tuple[str, bytes]]]
"""``(record position, split, [(extension, bytes), ...])``: one sample of a part."""


@dataclasses.dataclass(frozen=True)
class Part:
    """Part ``number`` (1-based) of ``count``: the records ``i`` with ``i % count == number - 1``."""

    number: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.number <= self.count:
            raise ConvertError(f"part {self.number}/{self.count}: give K/N with 1 <= K <= N (e.g. 2/8)")

    def __str__(self) -> str:
        return f"{self.number}/{self.count}"

    def holds(self, index: int) -> bool:
        """Whether the record at position ``index`` belongs to this part."""
        return index % self.count == self.number - 1

    def records_below(self, end: int) -> int:
        """How many of the records at positions ``0 .. end - 1`` belong to this part."""
        first = self.number - 1
        return 0 if end <= first else (end - first - 1) // self.count + 1

    def to_json(self) -> dict[str, int]:
        """``{"number": K, "count": N}`` (what ``convert.json`` keeps)."""
        return {"number": self.number, "count": self.count}

    @classmethod
    def from_json(cls, data: Any) -> "Part":
        """Inverse of :meth:`to_json`.

        Raises:
            ConvertError: not a part's mapping.
        """
        try:
            return cls(int(data["number"]), int(data["count"]))
        except (TypeError, KeyError, ValueError):
            raise ConvertError(f"not a part: {data!r}") from None


def parse_part(value: Any) -> Part | None:
    """``"K/N"``, ``(K, N)``, a :class:`Part` or None (the whole source) -> the part.

    Raises:
        ConvertError: anything else, or K outside ``1 .. N``.
    """
    if value is None or isinstance(value, Part):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        number, count = value
    else:
        match = _PART.match(str(value))
        if match is None:
            raise ConvertError(f"--part {value!r}: give K/N with 1 <= K <= N (e.g. 2/8)")
        number, count = match.groups()
    try:
        return Part(int(number), int(count))
    except (TypeError, ValueError):
        raise ConvertError(f"--part {value!r}: give K/N with 1 <= K <= N (e.g. 2/8)") from None


def part_from_slurm(environ: Mapping[str, str]) -> tuple[Part, str] | None:
    """The part of this Slurm array task and a line that says where it came from; None when
    ``SLURM_ARRAY_TASK_ID`` or ``SLURM_ARRAY_TASK_COUNT`` is not set.

    Raises:
        ConvertError: a value that is not a number, or a task id that is not one of the
            array's ``COUNT`` tasks from ``MIN`` in steps of ``STEP``.
    """
    if SLURM_ID not in environ or SLURM_COUNT not in environ:
        return None
    names = (SLURM_ID, SLURM_COUNT, SLURM_MIN, SLURM_STEP)
    shown = ", ".join(f"{name}={environ[name]}" for name in names if name in environ)
    try:
        task, count = int(environ[SLURM_ID]), int(environ[SLURM_COUNT])
        first, step = int(environ.get(SLURM_MIN, "0")), int(environ.get(SLURM_STEP, "1"))
    except ValueError:
        raise ConvertError(
            f"Slurm job array ({shown}): a value is not a whole number; pass --part K/N"
        ) from None
    offset = task - first
    if step < 1 or offset < 0 or offset % step or not 1 <= offset // step + 1 <= count:
        raise ConvertError(
            f"Slurm job array ({shown}): the task id is not one of {count} tasks from "
            f"{first} in steps of {step}; use a plain range (sbatch --array=0-{max(count - 1, 0)}) "
            "or pass --part K/N"
        )
    part = Part(offset // step + 1, count)
    return part, f"part {part} from the Slurm job array ({shown}); --part none converts the whole source"


# ----------------------------------------------------------------------------- a part folder
class PartFolder:
    """A finished part as ``merge`` reads it: its state, shards and report.

    Raises:
        ConvertError: the folder holds no conversion, a whole conversion (no part), or a part
            that is not finished; a file the part wrote is missing or changed size.
    """

    def __init__(self, path: Any) -> None:
        self.path: pathlib.Path | str
        self.remote: RemoteFolder | None = None
        if is_msc(path):
            self.remote = RemoteFolder(path, "a part folder")
            self.path = self.remote.url
            self.remote_sizes = self.remote.sizes()
            if not self.remote_sizes:
                raise ConvertError(f"{self.path}: no part folder there (no object under this prefix)")
            raw = (
                self.remote.read(STATE_NAME, "the part's state") if STATE_NAME in self.remote_sizes else None
            )
            state = None if raw is None else parse_state(raw, join_url(self.path, STATE_NAME))
        else:
            local = pathlib.Path(path).expanduser().resolve()
            self.path = local
            if not local.is_dir():
                raise ConvertError(f"{local}: not a folder (give the folders `convert --part K/N` wrote)")
            state = load_state(local)
        if state is None:
            raise ConvertError(
                f"{self.path}: not a part of a conversion (it holds no {STATE_NAME}); give the "
                "folders `convert --part K/N` wrote"
            )
        if "part" not in state:
            raise ConvertError(
                f"{self.path}: a whole conversion (converted without --part), not a part; "
                "give the folders `convert --part K/N` wrote"
            )
        self.state = state
        self.part = Part.from_json(state["part"])
        if state.get("status") != "done" or "part_files" not in state:
            why = "it stopped: see its report" if state.get("stopped") else "interrupted, or still running"
            raise ConvertError(
                f"{self.path}: part {self.part} is not finished ({why}); run its convert "
                f"command again with --part {self.part} --resume"
            )
        self.result = ConvertResult.from_json(state["result"])
        self.shards: dict[str, list[dict[str, Any]]] = state["part_files"]["shards"]
        self.report_bytes: int = state["part_files"]["report_bytes"]
        self._check_files()

    @property
    def settings(self) -> dict[str, Any]:
        """The settings that shape the output (as ``convert.json`` keeps them)."""
        return self.state.get("settings", {})

    @property
    def content(self) -> list[tuple[Any, ...]]:
        """The source's fingerprint without the modification times (which differ between
        machines): ``(relative path, size, sha256)`` per file."""
        return [(row[0], row[1], *row[3:]) for row in self.state.get("fingerprint", [])]

    def shown(self, name: str) -> str:
        """The path or URL of the part's file ``name``, for a message."""
        return (
            join_url(str(self.path), name) if self.remote is not None else str(pathlib.Path(self.path) / name)
        )

    def _size(self, name: str) -> int | None:
        if self.remote is not None:
            return self.remote_sizes.get(name)
        path = pathlib.Path(self.path) / name
        return path.stat().st_size if path.is_file() else None

    def _open(self, name: str, size: int) -> IO[bytes]:
        """The part's file ``name`` (of ``size`` bytes) opened for reading."""
        if self.remote is not None:
            return self.remote.stream(name, size, "a part's file")
        return (pathlib.Path(self.path) / name).open("rb")

    def _check_files(self) -> None:
        files = [(shard["name"], shard["bytes"]) for shards in self.shards.values() for shard in shards]
        for name, size in [*files, (REPORT_NAME, self.report_bytes)]:
            if self._size(name) != size:
                raise ConvertError(
                    f"{self.shown(name)}: missing or not the size part {self.part} wrote ({size} "
                    "bytes); copy the part folder again, or convert the part again with --overwrite"
                )

    # ------------------------------------------------------------------ reading
    def samples(self) -> Iterator[Sample]:
        """Every sample of the part, in record order (its splits' shards merged)."""
        return heapq.merge(*(self._split_samples(split) for split in self.shards), key=lambda s: s[0])

    def _split_samples(self, split: str) -> Iterator[Sample]:
        last = -1
        for shard in self.shards[split]:
            shown = self.shown(shard["name"])
            with self._open(shard["name"], shard["bytes"]) as fh:
                for index, parts in _tar_samples(fh, shown):
                    if index <= last or not self.part.holds(index):
                        raise ConvertError(
                            f"{shown}: record {index} is out of order or not one of part "
                            f"{self.part}'s records; convert the part again with --overwrite"
                        )
                    last = index
                    yield index, split, parts

    def report_lines(self) -> Iterator[tuple[int, bytes]]:
        """``(record position, line)`` of each rejected record, in record order."""
        with self._open(REPORT_NAME, self.report_bytes) as fh:
            for line in fh:
                if line.strip():
                    yield int(json.loads(line)["index"]), line


def _tar_samples(fh: IO[bytes], path: str) -> Iterator[tuple[int, list[tuple[str, bytes]]]]:
    """``(record position, [(extension, bytes), ...])`` of each sample in the shard open in
    ``fh`` (``path`` names it), streamed."""
    key, parts = None, []
    with tarfile.open(fileobj=fh, mode="r|") as tar:
        for member in tar:
            name, _, extension = member.name.partition(".")
            if key is not None and name != key:
                yield _position(path, key), parts
                parts = []
            key = name
            data = tar.extractfile(member)
            if data is None:
                raise ConvertError(f"{path}: {member.name} is not a file; not a shard convert wrote")
            with data:
                parts.append((extension, data.read()))
    if key is not None:
        yield _position(path, key), parts


def _position(path: str, key: str) -> int:
    if not key.isdigit():
        raise ConvertError(f"{path}: sample {key!r} is not keyed by its record's position")
    return int(key)


# ----------------------------------------------------------------------------- belonging together
def check_parts(folders: list[PartFolder]) -> None:
    """Check that ``folders`` are all N parts of one conversion: the same N, each part once,
    the same settings and the same source.

    Raises:
        ConvertError: naming the folders that differ, the part given twice or the parts missing.
    """
    first = folders[0]
    count = first.part.count
    for folder in folders[1:]:
        if folder.part.count != count:
            raise ConvertError(
                f"{folder.path} is part {folder.part} but {first.path} is part {first.part}: "
                "give the parts of one --part K/N conversion"
            )
    seen: dict[int, PartFolder] = {}
    for folder in folders:
        earlier = seen.setdefault(folder.part.number, folder)
        if earlier is not folder:
            both = (
                f"{folder.path} is given twice"
                if earlier.path == folder.path
                else f"{earlier.path} and {folder.path} are both part {folder.part}"
            )
            raise ConvertError(f"{both}: give each of the {count} parts once")
    missing = [str(Part(n, count)) for n in range(1, count + 1) if n not in seen]
    if missing:
        given = ", ".join(f"{f.part} ({f.path})" for f in sorted(folders, key=lambda f: f.part.number))
        raise ConvertError(f"part {', '.join(missing)} missing: given {given}")
    for folder in folders[1:]:
        before, now = first.settings, folder.settings
        changed = [key for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key)]
        if changed:
            details = "; ".join(f"{k}: {before.get(k)!r} there, {now.get(k)!r} here" for k in changed)
            raise ConvertError(
                f"{folder.path}: converted with other settings than {first.path} ({details}); "
                "convert every part with the same arguments"
            )
        if folder.content != first.content:
            differ = sorted(set(folder.content) ^ set(first.content))
            names = sorted({str(row[0]) for row in differ})
            raise ConvertError(
                f"{folder.path}: converted from another source than {first.path} "
                f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''} differ)"
            )


def check_same_part(state: dict[str, Any], part: Part | None, output: Any) -> None:
    """Refuse to resume a part as another part, or as a whole run (and the other way round),
    or to resume a merge that did not finish.

    Raises:
        ConvertError: naming what ``output`` holds and what to pass.
    """
    if state.get("merged_from") and state.get("status") != "done":
        raise ConvertError(
            f"{output}: holds a merge of parts that did not finish; run the merge again with --overwrite"
        )
    before = Part.from_json(state["part"]) if "part" in state else None
    if before == part:
        return
    held = f"part {before} of a conversion" if before is not None else "a whole conversion (no --part)"
    fix = f"--part {before}" if before is not None else "no --part"
    wanted = f"--part {part}" if part is not None else "no --part"
    raise ConvertError(
        f"{output}: holds {held}, not what {wanted} converts; resume it with {fix}, "
        "or start over with --overwrite"
    )
