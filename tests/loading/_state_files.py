"""Writing loader-state files by hand, the way ``torch.save`` lays them out, and measuring the
memory a read costs.

``torch.save`` writes a zip archive (members stored uncompressed under one folder): the pickle
``archive/data.pkl``, ``archive/byteorder``, ``archive/version`` and one ``archive/data/<key>``
per tensor storage, which the pickle names through a persistent id
``("storage", <torch storage class>, key, location, numel)``. :func:`write_archive` writes such
an archive from any pickle bytes and storages, and :func:`craft_pickle` pickles objects in which
:class:`Storage` stands for a persistent id and :class:`Call` for any ``REDUCE`` (a global called
with arguments), so a test can write exactly the file an attacker would.
"""

import dataclasses
import io
import os
import pathlib
import pickle
import struct
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

STATE_FILE = "train_dataloader_dprank000.pt"


@dataclasses.dataclass(frozen=True)
class Storage:
    """Pickled as the persistent id of a storage: ``torch.<type_name>``, ``key``, ``numel``."""

    type_name: str = "UntypedStorage"
    key: Any = "0"
    numel: Any = 0
    location: Any = "cpu"


class Call:
    """Pickled as ``function(*args)`` (with ``state`` applied by ``BUILD`` when given)."""

    def __init__(self, function: Any, *args: Any, state: Any = None) -> None:
        self.function, self.args, self.state = function, args, state

    def __reduce__(self) -> tuple[Any, ...]:
        if self.state is None:
            return (self.function, self.args)
        return (self.function, self.args, self.state)


class _CraftPickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, Storage):
            import torch

            return ("storage", getattr(torch, obj.type_name), obj.key, obj.location, obj.numel)
        return None


def craft_pickle(obj: Any) -> bytes:
    """``obj`` pickled with protocol 2 (as ``torch.save`` does), :class:`Storage` as persistent ids."""
    buffer = io.BytesIO()
    _CraftPickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def write_archive(
    path: pathlib.Path,
    pickle_bytes: bytes,
    storages: Mapping[str, bytes] | None = None,
    *,
    prefix: str = "archive",
    byteorder: bytes = b"little",
    extra: Mapping[str, bytes] | None = None,
    compress: Callable[[str], bool] = lambda name: False,
    flag_bits: int = 0,
) -> pathlib.Path:
    """Write a ``torch.save``-like archive at ``path``; ``compress(name)`` deflates a member,
    ``flag_bits`` are set on every member (patched in afterwards: ``zipfile`` clears them when it
    writes), ``extra`` adds members by full name."""
    members = {f"{prefix}/data.pkl": pickle_bytes, f"{prefix}/byteorder": byteorder}
    members.update({f"{prefix}/data/{key}": data for key, data in (storages or {}).items()})
    members[f"{prefix}/version"] = b"3\n"
    members.update(extra or {})
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if compress(name) else zipfile.ZIP_STORED
            archive.writestr(info, data)
    if flag_bits:
        _set_flag_bits(path, flag_bits)
    return path


def _set_flag_bits(path: pathlib.Path, bits: int) -> None:
    """Set ``bits`` in the general-purpose flags of every local header and directory entry."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    for info in infos:
        local = info.header_offset + 6
        data[local : local + 2] = struct.pack("<H", info.flag_bits | bits)
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        flags = struct.unpack_from("<H", data, at + 8)[0]
        data[at + 8 : at + 10] = struct.pack("<H", flags | bits)
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))


def write_state(
    path: pathlib.Path, obj: Any, storages: Mapping[str, bytes] | None = None, **kwargs: Any
) -> pathlib.Path:
    """:func:`write_archive` of ``craft_pickle(obj)``."""
    return write_archive(path, craft_pickle(obj), storages, **kwargs)


def _status_kib(field: str) -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def peak_rss_growth_mib(action: Callable[[], Any]) -> tuple[float | None, Exception | None]:
    """``(growth, error)``: how far this process's resident memory peaked above where it stood
    while ``action()`` ran, in MiB (``None`` where Linux's peak counter cannot be reset), and
    the exception ``action`` raised (``None`` if it returned)."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current VmRSS
        before: int | None = _status_kib("VmRSS")
    except (OSError, LookupError):
        before = None
    error = None
    try:
        action()
    except Exception as exc:
        error = exc
    growth = None if before is None else (_status_kib("VmHWM") - before) / 1024
    return growth, error


def sparse_file(path: pathlib.Path, size: int) -> pathlib.Path:
    """A file of ``size`` bytes that takes no disk space (a hole), starting like a zip."""
    with open(path, "wb") as fh:
        fh.write(b"PK\x03\x04")
        fh.truncate(size)
    return path


def stat_signature(path: pathlib.Path) -> tuple[int, int]:
    """``(size, mtime_ns)`` of ``path``: what a read must not change (for files too big to hash)."""
    info = os.stat(path)
    return info.st_size, info.st_mtime_ns


def assert_state_file_refused(
    tmp_path: pathlib.Path, write: Callable[[pathlib.Path], Any], error: Any, words: str
) -> None:
    """One row of a bad-state-file table: ``write(path)`` makes the file of DP rank 0 in a fresh
    folder; reading it as a resume does (``load_loader_state``) raises ``error`` naming the file
    and ``words`` in one paragraph without a traceback, changes nothing in the folder, and
    raises the process's resident memory peak by less than 64 MiB."""
    from energon_plugins.loading.checkpoint import load_loader_state
    from tests._refusals import assert_refusal, unchanged

    folder = tmp_path / "checkpoint"
    folder.mkdir()
    path = folder / STATE_FILE
    write(path)
    with unchanged(folder):
        growth, raised = peak_rss_growth_mib(lambda: load_loader_state(folder, dp_rank=0))
    assert isinstance(raised, error), repr(raised)
    message = str(raised)
    assert_refusal(message, str(path), words)
    assert "\n" not in message, "one paragraph"
    if growth is not None:
        assert growth < 64, f"reading it grew the resident memory by {growth:.0f} MiB"
