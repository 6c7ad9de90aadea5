"""Bounded tar readers: Energon's open tar files stop keeping every header they have read.

Energon 7.4 reads a sample by seeking one of the reader's open ``ITarFile`` objects (a
``tarfile.TarFile``) to the sample's byte offset and calling ``next()`` once per entry
(``ITarReader._get_item_by_sample_pointer``). The standard library's ``TarFile.next`` appends
every header it parses (a ``TarInfo`` with its pax headers, about 0.9 KB) to the file's
``members`` list, which random access never reads again. A training reader keeps up to 16 tar
files open for the whole run (``itar_cache_size``, Energon's ``parallel_shard_iters``) and
closes one only when another must open, so on a dataset of up to 16 shards per worker (and on
any shard until it is closed) ``members`` gains one ``TarInfo`` per entry read, epoch after
epoch: about 1.8 KB of resident memory per sample in every loader process, 7 MB per 1,000
batches of 4, 7 GB over a million steps.

:func:`bound_tar_readers` gives every tar file that a reader of the dataset opens a ``members``
list that keeps only the last :data:`KEPT_MEMBERS` headers. It is installed per reader, where
the datamodule assembles its loaders: the reader's cache of open files is replaced by a
:class:`BoundingFileCache`, which bounds each file as the reader puts it in. Energon's classes
are not patched, so a hand-wired Energon loader in the same process is left as Energon builds
it. What is read, and in which order, does not change: ``next()`` parses the header at the
file's ``offset`` and never consults ``members``, and the reader extracts regular files by
their ``TarInfo``. Only the member listing of an open file (``getmembers()``, which Energon's
readers never call) is cut to the recent headers.

Upstream, ``ITarFile.next`` (``megatron/energon/flavors/webdataset/itar.py``) should not keep
what it parses: drop the header from ``self.members`` after ``super().next()`` (or parse it with
``self.tarinfo.fromtarfile(self)`` and advance ``self.offset`` without appending).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from megatron.energon.flavors.webdataset.itar_reader import ITarReader

from energon_plugins.loading.errors_policy import iter_leaves

logger = logging.getLogger(__name__)

KEPT_MEMBERS = 8
"""Headers a bounded tar file keeps (the most recent ones). Energon never reads them back; a
few are kept so that ``members`` still ends with the entry just read, as ``tarfile`` expects."""


class RecentMembers(list):
    """A ``TarFile.members`` list that keeps only the last ``limit`` headers appended to it."""

    limit: int = KEPT_MEMBERS

    def __init__(self, members: Iterable[Any] = (), *, limit: int = KEPT_MEMBERS) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        super().__init__(members)
        self.limit = limit
        self._trim()

    def append(self, member: Any) -> None:
        """Append ``member``, dropping the oldest header once more than ``limit`` are kept."""
        super().append(member)
        self._trim()

    def _trim(self) -> None:
        if len(self) > self.limit:
            del self[: len(self) - self.limit]


def bound_members(tar_file: Any, limit: int = KEPT_MEMBERS) -> Any:
    """Make ``tar_file`` (a ``tarfile.TarFile``) keep only its last ``limit`` headers; return it."""
    members = getattr(tar_file, "members", None)
    if not (isinstance(members, RecentMembers) and members.limit == limit):
        tar_file.members = RecentMembers(members or (), limit=limit)
    return tar_file


class BoundingFileCache(dict):
    """An ``ITarReader.itar_files_cache`` (tar file id -> open ``ITarFile``) that bounds the
    header list of every file put into it (:func:`bound_members`)."""

    kept_members: int = KEPT_MEMBERS  # also while unpickling puts the items back

    def __init__(self, files: Any = (), *, kept_members: int = KEPT_MEMBERS) -> None:
        super().__init__()
        self.kept_members = kept_members
        self.update(files)

    def __setitem__(self, key: Any, tar_file: Any) -> None:
        super().__setitem__(key, bound_members(tar_file, self.kept_members))

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``dict.update``, bounding every file it puts in."""
        for key, tar_file in dict(*args, **kwargs).items():
            self[key] = tar_file

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """``dict.setdefault``, bounding the file it puts in."""
        if key not in self:
            self[key] = default
        return self[key]


def bound_tar_reader(reader: Any, kept_members: int = KEPT_MEMBERS) -> bool:
    """Bound the open tar files of one Energon tar reader; ``True`` if it is bounded now.

    A reader that is not an Energon ``ITarReader`` with a dict of open files (another
    reader, or a proxy around one) is left alone and ``False`` returned. Idempotent.
    """
    if not isinstance(reader, ITarReader):
        return False
    cache = getattr(reader, "itar_files_cache", None)
    if isinstance(cache, BoundingFileCache):
        return True
    if type(cache) is not dict:
        logger.debug(
            "%s: open-file cache is a %s; its tar files are not bounded", reader, type(cache).__name__
        )
        return False
    reader.itar_files_cache = BoundingFileCache(cache, kept_members=kept_members)
    return True


def tar_readers(dataset: Any) -> Iterator[Any]:
    """Every tar reader of every webdataset leaf under an Energon dataset (through blends and
    wrappers), as the leaves hold them."""
    for leaf in iter_leaves(dataset):
        yield from leaf.join_readers


def bound_tar_readers(dataset: Any, kept_members: int = KEPT_MEMBERS) -> int:
    """Bound the open tar files of every tar reader under ``dataset``; return how many readers.

    Call it on the dataset before its readers are wrapped in proxies (such as the truncated
    shard guard of :mod:`energon_plugins.loading.errors_policy`), and before the loader forks
    its workers: they inherit the bounded readers.
    """
    return sum(bound_tar_reader(reader, kept_members) for reader in tar_readers(dataset))


def kept_headers(dataset: Any) -> int:
    """How many tar headers the open tar files of ``dataset``'s readers hold in this process
    (the structure that grows without :func:`bound_tar_readers`)."""
    total = 0
    for reader in tar_readers(dataset):
        cache = getattr(reader, "itar_files_cache", None) or {}
        total += sum(len(getattr(tar_file, "members", ())) for tar_file in cache.values())
    return total
