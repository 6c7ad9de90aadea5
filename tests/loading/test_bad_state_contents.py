"""Bad contents inside a well-formed loader-state archive: pickles that name what a loader
state never holds or would allocate without bound, storages whose declared size disagrees with
their bytes, tensors and NumPy arrays that address more than they hold, and real states that do
not fit the restoring loader (another chain of Energon datasets, a field of another type, a
state that holds itself).

Each row is refused with :class:`StateFileError` (or :class:`StateMismatchError` where the setup
differs) naming the file, with no traceback, changing nothing on disk and without allocating
what the file asks for (see :func:`tests.loading._state_files.assert_state_file_refused`).
"""

import builtins
import collections
import copy
import os

import numpy as np
import pytest
import torch

from energon_plugins.loading.checkpoint import StateFileError, StateMismatchError
from energon_plugins.loading.safe_load import load_state_file
from energon_plugins.loading.state_check import StateShapeError
from tests._refusals import assert_refusal, unchanged
from tests.loading._state_files import (
    STATE_FILE,
    Call,
    Storage,
    assert_state_file_refused,
    craft_pickle,
    write_archive,
    write_state,
)

pytestmark = pytest.mark.bad_input


def _payload(state):
    return {"dataloader_state_dict": state, "format": 2}


def _tensor(size, stride, numel=4, offset=0, hooks=None):
    return _payload(
        Call(
            torch._utils._rebuild_tensor_v2,
            Storage("FloatStorage", "0", numel),
            offset,
            size,
            stride,
            False,
            collections.OrderedDict(hooks or {}),
        )
    )


def _tensor_file(path, size, stride, numel=4, offset=0, hooks=None):
    write_state(path, _tensor(size, stride, numel, offset, hooks), {"0": bytes(4 * numel)})


RECONSTRUCT = np.zeros(0).__reduce__()[0]
"""NumPy's ``_reconstruct``, as an array's pickle names it."""


def _array_state(shape, dtype, data):
    return Call(RECONSTRUCT, np.ndarray, (0,), b"b", state=(1, shape, dtype, False, data))


# (id, write(path), exception, words the message holds besides the file's name)
ROWS = [
    # --- pickles that name what a loader state never holds
    (
        "forbidden-global",
        lambda p: write_state(p, _payload(Call(os.system, "echo pwned"))),
        StateFileError,
        "references posix.system",
    ),
    (
        "eval",
        lambda p: write_state(p, _payload(Call(builtins.eval, "1+1"))),
        StateFileError,
        "references builtins.eval",
    ),
    (
        "getattr",
        lambda p: write_state(p, _payload(Call(builtins.getattr, 1, "real"))),
        StateFileError,
        "references builtins.getattr",
    ),
    (
        "list-of-huge-range",
        lambda p: write_state(p, _payload(Call(list, range(10**12)))),
        StateFileError,
        "builtins.list(range)",
    ),
    (
        "bytes-of-a-size",
        lambda p: write_state(p, _payload(Call(bytes, 2**40))),
        StateFileError,
        "builtins.bytes(<a size>)",
    ),
    (
        "bytearray-of-a-size",
        lambda p: write_state(p, _payload(Call(bytearray, 2**40))),
        StateFileError,
        "builtins.bytearray(<a size>)",
    ),
    (
        "storage-class-called",
        lambda p: write_state(p, _payload(Call(torch.UntypedStorage, 2**40))),
        StateFileError,
        "not callable",
    ),
    (
        "non-storage-persistent-id",
        lambda p: write_state(p, _payload(Storage("UntypedStorage", "0", 0, location=None))),
        StateFileError,
        "a storage with the key",
    ),
    (
        "ordered-dict-with-state",
        lambda p: write_state(p, _payload(Call(collections.OrderedDict, state={"x": 1}))),
        StateFileError,
        "setting the state of a OrderedDict",
    ),
    # --- storages whose declared size disagrees with the archive, or has no bound
    (
        "storage-declaring-2**50",
        lambda p: write_state(p, _payload(Storage("UntypedStorage", "0", 2**50)), {"0": bytes(1_600_000)}),
        StateFileError,
        "more than the 268,435,456 a loader state may hold",
    ),
    (
        "float-storage-declaring-2**40",
        lambda p: write_state(p, _payload(Storage("FloatStorage", "0", 2**40)), {"0": bytes(16)}),
        StateFileError,
        "a loader state may hold",
    ),
    (
        "storage-size-disagrees",
        lambda p: write_state(p, _payload(Storage("FloatStorage", "0", 4)), {"0": bytes(8)}),
        StateFileError,
        "declares 4 elements (16 bytes) but its archive member holds 8 bytes",
    ),
    (
        "storage-missing",
        lambda p: write_state(p, _payload(Storage("ByteStorage", "7", 4))),
        StateFileError,
        "names storage '7', which the archive does not hold",
    ),
    (
        "storage-key-escapes",
        lambda p: write_state(p, _payload(Storage("ByteStorage", "../data.pkl", 4))),
        StateFileError,
        "a storage with the key '../data.pkl'",
    ),
    (
        "storage-negative-numel",
        lambda p: write_state(p, _payload(Storage("ByteStorage", "0", -1)), {"0": b""}),
        StateFileError,
        "declares -1 elements",
    ),
    (
        "storage-named-twice",
        lambda p: write_state(
            p, _payload([Storage("ByteStorage", "0", 4), Storage("ByteStorage", "0", 2)]), {"0": bytes(4)}
        ),
        StateFileError,
        "named twice with different sizes",
    ),
    (
        "storage-of-a-list-type",
        lambda p: _swap_storage_type(p),
        StateFileError,
        "a storage of type",
    ),
    (
        "deflate-bomb-storage",
        lambda p: write_state(
            p,
            _payload(Storage("UntypedStorage", "0", 32 * 2**20)),
            {"0": bytes(32 * 2**20)},
            compress=lambda name: "/data/" in name,
        ),
        StateFileError,
        "is compressed",
    ),
    # --- tensors that address more than their storage
    (
        "tensor-past-its-storage",
        lambda p: _tensor_file(p, (100,), (1,)),
        StateFileError,
        "reaches past its storage",
    ),
    (
        "tensor-broadcast-huge",
        lambda p: _tensor_file(p, (2**40,), (0,)),
        StateFileError,
        "elements over a storage of 4",
    ),
    (
        "tensor-negative-size",
        lambda p: _tensor_file(p, (-1,), (1,)),
        StateFileError,
        "negative or non-integer",
    ),
    (
        "tensor-offset-past-end",
        lambda p: _tensor_file(p, (2,), (1,), offset=10),
        StateFileError,
        "reaches past",
    ),
    (
        "tensor-with-hooks",
        lambda p: _tensor_file(p, (2,), (1,), hooks={0: 1}),
        StateFileError,
        "gradient hooks",
    ),
    # --- numpy arrays that would crash NumPy or allocate without bound
    (
        "numpy-object-array",
        lambda p: write_state(
            p, _payload(_array_state((2**20,), Call(np.dtype, "O", False, True), [1, 2, 3]))
        ),
        StateFileError,
        "numpy dtype holding Python objects",
    ),
    (
        "numpy-shape-disagrees",
        lambda p: write_state(p, _payload(_array_state((2**40,), Call(np.dtype, "u1", False, True), b"ab"))),
        StateFileError,
        "with 2 bytes of data",
    ),
    (
        "numpy-huge-reconstruct",
        lambda p: write_state(p, _payload(Call(RECONSTRUCT, np.ndarray, (2**40,), b"b"))),
        StateFileError,
        "numpy's _reconstruct",
    ),
    (
        "numpy-dtype-forged-flags",
        lambda p: write_state(
            p, _payload(Call(np.dtype, "V8", False, True, state=(3, "|", None, None, None, 8, 1, 63)))
        ),
        StateFileError,
        "a state numpy would not write",
    ),
]


def _swap_storage_type(path):
    """Rewrite the pickle so that a persistent id names ``builtins.list`` as its storage type."""
    pickled = craft_pickle(_payload(Storage("ByteStorage", "0", 4)))
    pickled = pickled.replace(b"ctorch\nByteStorage\n", b"c__builtin__\nlist\n")
    write_archive(path, pickled, {"0": bytes(4)})


@pytest.mark.parametrize("row_id, write, error, words", ROWS, ids=[row[0] for row in ROWS])
def test_a_bad_state_content_is_refused_naming_the_file(tmp_path, row_id, write, error, words):
    assert_state_file_refused(tmp_path, write, error, words)


# --------------------------------------------------------------------------- against a loader
@pytest.fixture(scope="module")
def restoring_datamodule(vqa_dataset, tokenizer, small_clip_processor):
    """A datamodule that has not iterated (each row refuses before restoring into it)."""
    from energon_plugins import EnergonMultiModalDataModule

    return EnergonMultiModalDataModule(
        str(vqa_dataset.path),
        tokenizer,
        small_clip_processor,
        seq_length=300,
        num_workers=0,
        shuffle_buffer_size=4,
    )


@pytest.fixture(scope="module")
def saved_payload(vqa_dataset, tokenizer, small_clip_processor, tmp_path_factory):
    """A real payload: the same setup as :func:`restoring_datamodule`, saved after two batches."""
    from energon_plugins import EnergonMultiModalDataModule

    dm = EnergonMultiModalDataModule(
        str(vqa_dataset.path),
        tokenizer,
        small_clip_processor,
        seq_length=300,
        num_workers=0,
        shuffle_buffer_size=4,
    )
    loader = dm.train_dataloader()
    next(loader), next(loader)
    path = dm.save_checkpoint(tmp_path_factory.mktemp("saved"))
    return load_state_file(path)


def _first_dataset_level(payload):
    return payload["dataloader_state_dict"]["energon"].worker_states[0]


def _inner(payload, depth):
    """The ``depth``-th nested Energon dataset state of the first worker."""
    node = _first_dataset_level(payload)
    for _ in range(depth):
        node = node["datasets"][0]
    return node


def _retype_sample_index(payload):
    node = _inner(payload, 1)
    while "_sample_index" not in node:
        node = node["datasets"][0]
    node["_sample_index"] = "2"


def _make_cycle(payload):
    state = payload["dataloader_state_dict"]
    state["energon"].worker_states.append(state["energon"].worker_states)


LOADER_ROWS = [
    (
        "another-dataset-chain",
        lambda payload: _inner(payload, 1).__setitem__("__class__", "ShuffleBufferDataset"),
        StateShapeError,
        "was saved by a different setup",
    ),
    (
        "a-wrapper-missing",
        lambda payload: _inner(payload, 1).__setitem__("datasets", []),
        StateShapeError,
        "wraps 0 datasets where this loader wraps 1",
    ),
    (
        "an-unexpected-key",
        lambda payload: _inner(payload, 1).__setitem__("surprise", 1),
        StateShapeError,
        "unexpected keys ['surprise']",
    ),
    (
        "a-key-removed",
        lambda payload: _inner(payload, 1).pop("datasets"),
        StateShapeError,
        "lacks ['datasets']",
    ),
    ("a-field-retyped", _retype_sample_index, StateShapeError, "is a str ('2') where this loader has a int"),
    (
        "worker-state-a-list",
        lambda payload: _first_dataset_level(payload).__setitem__("datasets", "x"),
        StateShapeError,
        "is a str",
    ),
    ("holds-itself", _make_cycle, StateFileError, "worker_states is a list"),
    (
        "other-fingerprint",
        lambda payload: payload["fingerprint"].__setitem__("seq_length", 9),
        StateMismatchError,
        "seq_length: saved 9, now 300",
    ),
]


@pytest.mark.parametrize("row_id, mutate, error, words", LOADER_ROWS, ids=[row[0] for row in LOADER_ROWS])
def test_a_state_that_does_not_fit_the_loader_is_refused(
    tmp_path, restoring_datamodule, saved_payload, row_id, mutate, error, words
):
    payload = copy.deepcopy(saved_payload)
    mutate(payload)
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    path = folder / STATE_FILE
    torch.save(payload, path)
    with unchanged(folder), pytest.raises(error) as info:
        restoring_datamodule.load_checkpoint(folder)
    message = str(info.value)
    assert_refusal(message, str(path), words)
    assert restoring_datamodule.train_dataloader()._iterator is None, "nothing was restored or iterated"
