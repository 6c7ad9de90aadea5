"""One split's webdataset shards: ``SPLIT-000000.tar``, ``SPLIT-000001.tar``, ..., cut by size.

Tars are written with the standard library's ``tarfile`` and fixed metadata (mtime 0, mode
0444, no owner names, ustar headers), so the same samples give byte-identical shards. A shard
is closed before the sample that would take it past ``max_bytes`` (a sample larger than that
gets a shard of its own). :meth:`ShardStream.checkpoint` records the shards closed so far and
the byte offset after the last whole sample of the open one; :meth:`ShardStream.restore`
truncates the open shard there and goes on writing, so a resumed run writes exactly the bytes
an uninterrupted one would.
"""

import io
import os
import pathlib
import re
import tarfile
from typing import Any

from energon_plugins.errors import ConvertError

BLOCK = tarfile.BLOCKSIZE
END_OF_ARCHIVE = 2 * BLOCK
RECORD = tarfile.RECORDSIZE


def tar_size(parts: list[tuple[str, bytes]]) -> int:
    """Bytes a sample's parts take in a ustar tar (a header block each, data padded to blocks)."""
    return sum(BLOCK + -(-len(data) // BLOCK) * BLOCK for _, data in parts)


def closed_size(offset: int) -> int:
    """The size of a tar closed at ``offset``: end-of-archive blocks, padded to a record."""
    return -(-(offset + END_OF_ARCHIVE) // RECORD) * RECORD


def shard_pattern(split: str) -> re.Pattern:
    """The file names of ``split``'s shards."""
    return re.compile(rf"^{re.escape(split)}-\d{{6}}\.tar$")


class ShardStream:
    """Writes the samples of one split into size-bounded tar shards under ``directory``."""

    def __init__(self, directory: pathlib.Path, split: str, max_bytes: int) -> None:
        self.directory = directory
        self.split = split
        self.max_bytes = max_bytes
        self.closed: list[dict[str, Any]] = []
        self._file: Any = None
        self._tar: tarfile.TarFile | None = None
        self._records = 0

    # ------------------------------------------------------------------ writing
    def _name(self, number: int) -> str:
        return f"{self.split}-{number:06d}.tar"

    def _open(self, name: str, offset: int | None = None) -> None:
        path = self.directory / name
        if offset is None:
            self._file = path.open("wb")
        else:
            self._file = path.open("r+b")
            self._file.truncate(offset)
            self._file.seek(offset)
        self._tar = tarfile.TarFile(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)

    def _close_open(self) -> None:
        if self._tar is None:
            return
        self._tar.close()
        self._file.close()
        name = self._name(len(self.closed))
        self.closed.append(
            {
                "name": name,
                "records": self._records,
                "bytes": (self.directory / name).stat().st_size,
            }
        )
        self._tar = self._file = None
        self._records = 0

    def write(self, key: str, parts: list[tuple[str, bytes]]) -> None:
        """Append one sample (``key`` plus its ``(extension, bytes)`` parts)."""
        if (
            self._tar is not None
            and self._records
            and (closed_size(self._tar.offset + tar_size(parts)) > self.max_bytes)
        ):
            self._close_open()
        if self._tar is None:
            self._open(self._name(len(self.closed)))
        assert self._tar is not None
        for extension, data in parts:
            info = tarfile.TarInfo(f"{key}.{extension}")
            info.size = len(data)
            info.mode = 0o444
            self._tar.addfile(info, io.BytesIO(data))
        self._records += 1

    def close(self) -> list[dict[str, Any]]:
        """Close the open shard; return every shard (``name``, ``records``, ``bytes``)."""
        self._close_open()
        return list(self.closed)

    def abort(self) -> None:
        """Close the open shard's file without finishing the tar (after a failed write, or a run
        that stops before its end): a resumed run cuts it back to the last checkpoint."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:  # a full disk: what could not be flushed is cut on resume anyway
                pass
        self._tar = self._file = None

    # ------------------------------------------------------------------ resume
    def checkpoint(self) -> dict[str, Any]:
        """The stream's state now (shards closed, and the open shard's records and offset)."""
        state: dict[str, Any] = {"closed": list(self.closed), "open": None}
        if self._tar is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            state["open"] = {
                "name": self._name(len(self.closed)),
                "records": self._records,
                "offset": self._tar.offset,
            }
        return state

    @classmethod
    def restore(
        cls, directory: pathlib.Path, split: str, max_bytes: int, state: dict[str, Any]
    ) -> "ShardStream":
        """A stream that continues from :meth:`checkpoint`'s ``state``.

        Raises:
            ConvertError: a shard the state lists is missing or changed size.
        """
        stream = cls(directory, split, max_bytes)
        for shard in state["closed"]:
            path = directory / shard["name"]
            if not path.is_file() or path.stat().st_size != shard["bytes"]:
                raise ConvertError(
                    f"{path}: the shard changed since the interrupted run "
                    "(missing or a different size); start over with --overwrite"
                )
            stream.closed.append(dict(shard))
        opened = state.get("open")
        if opened:
            path = directory / opened["name"]
            if not path.is_file() or path.stat().st_size < opened["offset"]:
                raise ConvertError(
                    f"{path}: the open shard is shorter than at the last "
                    "checkpoint; start over with --overwrite"
                )
            stream._open(opened["name"], offset=opened["offset"])
            stream._records = opened["records"]
        return stream

    def known_names(self) -> set[str]:
        """Names of the shards this stream holds (closed and open)."""
        names = {shard["name"] for shard in self.closed}
        if self._tar is not None:
            names.add(self._name(len(self.closed)))
        return names
