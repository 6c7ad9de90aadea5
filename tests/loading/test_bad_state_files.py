"""Bad loader-state files: each row is refused with a :class:`StateFileError` (or the typed error
its kind has) that names the file, with no traceback, changing nothing on disk, and without
allocating what the file asks for.

This file holds the faults of the file itself, of its archive and of the payload's envelope
(format, fingerprint, the types of the loader state's fields); ``test_bad_state_contents.py``
holds what a well-formed archive may carry inside. Rows write the file at
``train_dataloader_dprank000.pt`` of a fresh folder, then read it the way a resume does
(:func:`tests.loading._state_files.assert_state_file_refused`). Crafted archives are written
with :mod:`tests.loading._state_files`, as ``torch.save`` lays them out.
"""

import json
import os
import pickle
import struct
import zipfile

import pytest
import torch

from energon_plugins.loading.checkpoint import (
    StateFileError,
    load_loader_state,
    save_loader_state,
)
from energon_plugins.loading.safe_load import load_state_file
from tests._refusals import assert_refusal, unchanged
from tests.loading._state_files import (
    STATE_FILE,
    assert_state_file_refused,
    craft_pickle,
    peak_rss_growth_mib,
    sparse_file,
    stat_signature,
    write_state,
)

pytestmark = pytest.mark.bad_input

OK_PAYLOAD = {"dataloader_state_dict": {"x": 1}, "format": 2, "fingerprint": {"a": 1}}


def _energon_state(**changes):
    from megatron.energon.savable_loader import SavableDataLoaderState

    fields = {"worker_states": [], "next_worker_id": 0, "micro_batch_size": 1}
    fields.update(changes)
    return SavableDataLoaderState(**fields)


def _payload(state):
    return {"dataloader_state_dict": state, "format": 2}


def _state_without(field):
    """An Energon ``SavableDataLoaderState`` whose pickled attributes lack ``field``."""
    state = _energon_state()
    delattr(state, field)  # an unset slot is left out of the pickled state
    return state


def _nested(levels):
    value = []
    for _ in range(levels):
        value = [value]
    return value


def _truncated(path, keep):
    save_loader_state(path.parent, {"x": list(range(200))}, dp_rank=0, fingerprint={"a": 1})
    data = path.read_bytes()
    path.write_bytes(data[: keep(len(data))])


def _with_bytes_changed(path, where, new):
    save_loader_state(path.parent, {"x": 1}, dp_rank=0, fingerprint={"a": 1})
    data = bytearray(path.read_bytes())
    at = where(bytes(data))
    data[at : at + len(new)] = new
    path.write_bytes(bytes(data))


def _many_members(path, count):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", craft_pickle(OK_PAYLOAD))
        for index in range(count):
            archive.writestr(f"archive/x{index}", b"")


def _forge_end_record(path, field, value):
    """Write a real state, then overwrite ``field`` of its zip end record (and of the zip64
    record torch also writes): ``"entries"`` or ``"directory_size"``."""
    save_loader_state(path.parent, {"x": 1}, dp_rank=0, fingerprint={})
    data = bytearray(path.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    offset, fmt = {"entries": (10, "<H"), "directory_size": (12, "<L")}[field]
    struct.pack_into(fmt, data, end + offset, min(value, 0xFFFF if fmt == "<H" else 0xFFFFFFFF))
    zip64 = data.rfind(b"PK\x06\x06")
    if zip64 >= 0:
        struct.pack_into("<Q", data, zip64 + {"entries": 32, "directory_size": 40}[field], value)
    path.write_bytes(bytes(data))


ROWS = [
    # --- not an archive at all
    ("empty-file", lambda p: p.write_bytes(b""), StateFileError, "not written by torch.save"),
    ("garbage", lambda p: p.write_bytes(os.urandom(4096)), StateFileError, "not written by torch.save"),
    (
        "json-instead",
        lambda p: p.write_text(json.dumps({"dataloader_state_dict": {"x": 1}})),
        StateFileError,
        "torch.save",
    ),
    (
        "yaml-instead",
        lambda p: p.write_text("dataloader_state_dict:\n  x: 1\n"),
        StateFileError,
        "torch.save",
    ),
    ("plain-pickle", lambda p: p.write_bytes(pickle.dumps(OK_PAYLOAD)), StateFileError, "torch.save"),
    (
        "legacy-torch-format",
        lambda p: torch.save(OK_PAYLOAD, p, _use_new_zipfile_serialization=False),
        StateFileError,
        "torch.save",
    ),
    ("zip-end-record-only", lambda p: p.write_bytes(b"PK\x05\x06" + bytes(18)), StateFileError, "torch.save"),
    # --- truncated or damaged archives
    ("truncated-half", lambda p: _truncated(p, lambda n: n // 2), StateFileError, "truncated"),
    ("truncated-tail", lambda p: _truncated(p, lambda n: n - 10), StateFileError, "truncated"),
    ("truncated-head", lambda p: _truncated(p, lambda n: 30), StateFileError, "truncated"),
    (
        "wrong-local-magic",
        lambda p: _with_bytes_changed(p, lambda d: 0, b"XX\x03\x04"),
        StateFileError,
        "truncated or corrupt",
    ),
    (
        "flipped-pickle-byte",
        lambda p: _with_bytes_changed(p, lambda d: d.index(b"dataloader_state_dict"), b"D"),
        StateFileError,
        "CRC",
    ),
    # --- not a regular file
    ("directory", lambda p: p.mkdir(), StateFileError, "is a directory"),
    ("symlink-to-dev-zero", lambda p: p.symlink_to("/dev/zero"), StateFileError, "not a regular file"),
    ("symlink-to-dev-null", lambda p: p.symlink_to("/dev/null"), StateFileError, "not a regular file"),
    ("fifo", lambda p: os.mkfifo(p), StateFileError, "not a regular file"),
    ("symlink-to-directory", lambda p: p.symlink_to(p.parent), StateFileError, "is a directory"),
    (
        "dangling-symlink",
        lambda p: p.symlink_to(p.parent / "gone.pt"),
        FileNotFoundError,
        "a symlink to a missing file",
    ),
    # --- archives that are zips but not torch.save's
    (
        "foreign-zip",
        lambda p: zipfile.ZipFile(p, "w").writestr("a.txt", "x"),
        StateFileError,
        "not a torch.save file (no data.pkl inside)",
    ),
    (
        "two-pickles",
        lambda p: write_state(p, OK_PAYLOAD, extra={"archive/more/data.pkl": b"x"}),
        StateFileError,
        "several pickles",
    ),
    (
        "member-escapes-with-dotdot",
        lambda p: write_state(p, OK_PAYLOAD, extra={"archive/../../etc/passwd": b"x"}),
        StateFileError,
        "points outside the archive",
    ),
    (
        "absolute-member",
        lambda p: write_state(p, OK_PAYLOAD, extra={"/etc/passwd": b"x"}),
        StateFileError,
        "points outside the archive",
    ),
    (
        "member-outside-folder",
        lambda p: write_state(p, OK_PAYLOAD, extra={"other/notes.txt": b"x"}),
        StateFileError,
        "lies outside the archive's folder",
    ),
    (
        "compressed-pickle",
        lambda p: write_state(p, OK_PAYLOAD, compress=lambda name: name.endswith("data.pkl")),
        StateFileError,
        "is compressed",
    ),
    (
        "encrypted-members",
        lambda p: write_state(p, OK_PAYLOAD, flag_bits=0x1),
        StateFileError,
        "is encrypted",
    ),
    ("big-endian", lambda p: write_state(p, OK_PAYLOAD, byteorder=b"big"), StateFileError, "little-endian"),
    ("too-many-members", lambda p: _many_members(p, 10_001), StateFileError, "10,002 archive members"),
    (
        "member-count-forged",
        lambda p: _forge_end_record(p, "entries", 2**40),
        StateFileError,
        "lists 1,099,511,627,776 archive members",
    ),
    (
        "directory-size-forged",
        lambda p: _forge_end_record(p, "directory_size", 2**33),
        StateFileError,
        "8,589,934,592-byte list of archive members",
    ),
    (
        "byteorder-oversized",
        lambda p: write_state(p, OK_PAYLOAD, byteorder=b"little" * 100_000),
        StateFileError,
        "not written on a little-endian machine",
    ),
    # --- payloads of another version, format or with fields of the wrong type
    (
        "newer-format",
        lambda p: write_state(p, {**OK_PAYLOAD, "format": 3}),
        StateFileError,
        "written by a newer",
    ),
    (
        "format-as-text",
        lambda p: write_state(p, {**OK_PAYLOAD, "format": "2"}),
        StateFileError,
        "known formats are 1 to 2",
    ),
    (
        "format-zero",
        lambda p: write_state(p, {**OK_PAYLOAD, "format": 0}),
        StateFileError,
        "known formats are 1 to 2",
    ),
    ("not-a-dict", lambda p: write_state(p, [1, 2, 3]), StateFileError, "holds no loader state"),
    (
        "format-1-without-state",
        lambda p: write_state(p, {"format": 1}),
        StateFileError,
        "holds no loader state",
    ),
    (
        "fingerprint-a-list",
        lambda p: write_state(p, {**OK_PAYLOAD, "fingerprint": [1]}),
        StateFileError,
        "fingerprint of type list",
    ),
    (
        "fingerprint-holds-a-tensor",
        lambda p: torch.save({**OK_PAYLOAD, "fingerprint": {"a": torch.zeros(2)}}, p),
        StateFileError,
        "holds a Tensor, not a plain value",
    ),
    (
        "energon-a-string",
        lambda p: write_state(p, _payload({"energon": "x", "skip_counts": {}})),
        StateFileError,
        "state['energon'] is a str",
    ),
    (
        "skip-counts-a-list",
        lambda p: write_state(p, _payload({"energon": None, "skip_counts": [1]})),
        StateFileError,
        "state['skip_counts'] must map workers",
    ),
    (
        "skip-count-negative",
        lambda p: write_state(p, _payload({"energon": None, "skip_counts": {0: {"corrupt": -4}}})),
        StateFileError,
        "state['skip_counts'] must map workers",
    ),
    (
        "next-worker-id-text",
        lambda p: torch.save(_payload(_energon_state(next_worker_id="1")), p),
        StateFileError,
        "next_worker_id is a str",
    ),
    (
        "worker-states-a-dict",
        lambda p: torch.save(_payload(_energon_state(worker_states={})), p),
        StateFileError,
        "worker_states is a dict",
    ),
    (
        "micro-batch-size-float",
        lambda p: torch.save(_payload(_energon_state(micro_batch_size=1.5)), p),
        StateFileError,
        "micro_batch_size is a float",
    ),
    (
        "energon-state-lacks-a-field",
        lambda p: write_state(p, _payload(_state_without("next_worker_id"))),
        StateFileError,
        "lacks its field 'next_worker_id'",
    ),
    (
        "nested-300-deep",
        lambda p: torch.save(_payload(_nested(300)), p),
        StateFileError,
        "nests deeper than 100 levels",
    ),
]


@pytest.mark.parametrize("row_id, write, error, words", ROWS, ids=[row[0] for row in ROWS])
def test_a_bad_state_file_is_refused_naming_it(tmp_path, row_id, write, error, words):
    assert_state_file_refused(tmp_path, write, error, words)


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path):
    """A 500 MiB file (a sparse hole: no disk used) is refused by its size alone."""
    path = sparse_file(tmp_path / STATE_FILE, 500 * 2**20)
    before = stat_signature(path)
    growth, raised = peak_rss_growth_mib(lambda: load_loader_state(tmp_path, dp_rank=0))
    assert isinstance(raised, StateFileError), repr(raised)
    assert_refusal(str(raised), str(path), "more than the 402,653,184 a loader state file may have")
    assert stat_signature(path) == before
    if growth is not None:
        assert growth < 16


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_named(tmp_path):
    path = tmp_path / STATE_FILE
    save_loader_state(tmp_path, {"x": 1}, dp_rank=0, fingerprint={})
    path.chmod(0)
    try:
        with unchanged(tmp_path), pytest.raises(StateFileError) as info:
            load_state_file(path)
        assert_refusal(str(info.value), str(path), "cannot read")
    finally:
        path.chmod(0o644)
