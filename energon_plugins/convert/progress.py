"""What a running conversion reports: :class:`ConvertProgress`, and the record count behind its
total.

:func:`~energon_plugins.convert.run.convert_dataset` takes a :class:`ConvertProgress` (the
command line draws it with rich on stderr), or a plain callable ``progress(done, rejected)``.
The total comes from :class:`RecordCounter`, a background process started only when someone
watches: a reader's own ``count_records(source)`` when it has one, the row counts in the
footers of parquet files, or else a second pass of the reader's ``scan`` (it streams, and for a
JSON array it runs at about 80 MB/s beside the conversion, on another core).
"""

import multiprocessing
import os
import pathlib
from collections.abc import Callable
from typing import Any

from energon_plugins.convert.interrupt import child_ignores_interrupts, start_child


class ConvertProgress:
    """Receives a conversion's progress; every method does nothing unless overridden."""

    def notice(self, text: str) -> None:
        """A line the user should read even without a progress display (what ``--overwrite``
        removes)."""

    def phase(self, text: str) -> None:
        """A step that shows no record count (``hashing the source ...``, ``indexing 12
        shards ...``)."""

    @property
    def wants_total(self) -> bool:
        """Whether the source's records are counted for :meth:`total` (by default: when a
        subclass overrides it)."""
        return type(self).total is not ConvertProgress.total

    def total(self, records: int) -> None:
        """The number of records in the source, once known."""

    def advance(self, done: int, rejected: int) -> None:
        """Records handled so far (counted from the first record, also after a resume), and
        how many of them were rejected."""


class _Callback(ConvertProgress):
    """A plain ``progress(done, rejected)`` callable as a :class:`ConvertProgress`."""

    def __init__(self, callback: Callable[[int, int], None]) -> None:
        self._callback = callback

    def advance(self, done: int, rejected: int) -> None:
        """Call the callable."""
        self._callback(done, rejected)


def as_progress(progress: Any) -> ConvertProgress | None:
    """``progress`` as a :class:`ConvertProgress` (None stays None)."""
    if progress is None or isinstance(progress, ConvertProgress):
        return progress
    if callable(progress):
        return _Callback(progress)
    raise TypeError(f"progress must be a ConvertProgress or a callable, not {type(progress).__name__}")


# ----------------------------------------------------------------------------- the total
def count_records(reader: Any, source: pathlib.Path, files: list[pathlib.Path] | None) -> int:
    """The records ``reader.scan(source)`` yields, counted as cheaply as the format allows."""
    counter = getattr(reader, "count_records", None)
    if callable(counter):
        return int(counter(source))
    if files and all(path.suffix == ".parquet" for path in files):
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(path).metadata.num_rows for path in files)
    return sum(1 for _ in reader.scan(source))


def _count_in_child(
    connection: Any, parent_pid: int, reader: Any, source: pathlib.Path, files: list[pathlib.Path] | None
) -> None:
    child_ignores_interrupts(parent_pid)  # Ctrl-C and SIGTERM are the parent's to handle
    try:
        connection.send(count_records(reader, source, files))
    except Exception:  # noqa: BLE001 - no total then; the conversion reports its own errors
        connection.send(None)
    finally:
        connection.close()


class RecordCounter:
    """Counts the source's records in a background process; :meth:`poll` gives the total once
    it is known. Stop it with :meth:`close`."""

    def __init__(self, reader: Any, source: pathlib.Path, files: list[pathlib.Path] | None) -> None:
        methods = multiprocessing.get_all_start_methods()
        context: Any = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_count_in_child,
            daemon=True,
            args=(send, os.getpid(), reader, source, files),
            name="energon-plugins convert count",
        )
        start_child(self._process)
        send.close()
        self.result: int | None = None
        self._done = False

    def poll(self) -> int | None:
        """The total if it has just arrived (once), else None."""
        if self._done or not self._receive.poll():
            return None
        self._done = True
        try:
            self.result = self._receive.recv()
        except EOFError:
            self.result = None
        self.close()
        return self.result

    def close(self) -> None:
        """Stop the count if it still runs."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join(timeout=5)
        self._receive.close()
        self._done = True
