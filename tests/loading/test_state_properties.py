"""Properties of restoring from a loader state file, whatever the file holds.

- Random bytes are refused with :class:`StateFileError`, whatever they start with.
- A real saved state with random bytes changed, cut or inserted either restores so that the next
  batch is exactly the one that followed the save, or is refused with the project's typed error
  (:class:`~energon_plugins.errors.EnergonPluginsError`), never another exception.
- The same holds for a real state whose payload has one value replaced by a value of another
  type, anywhere in it.

Every read stays within a few tens of MiB of resident memory. The datamodule restores with no
workers (restore and first batch take about a second), so the example counts stay modest.
"""

import copy
import dataclasses
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from energon_plugins.errors import EnergonPluginsError
from energon_plugins.loading.checkpoint import StateFileError, load_loader_state
from energon_plugins.loading.safe_load import load_state_file
from tests.loading._state_files import STATE_FILE, peak_rss_growth_mib

MEMORY_BOUND_MIB = 48
"""How far a read may raise this process's resident memory peak."""

QUICK = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RESTORING = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclasses.dataclass
class Resume:
    """A saved state, the batch that followed it, and a datamodule of the same setup to
    restore into (it never iterates except right after a successful restore)."""

    raw: bytes = dataclasses.field(repr=False)
    payload: dict = dataclasses.field(repr=False)
    expected: dict = dataclasses.field(repr=False)
    datamodule: object = dataclasses.field(repr=False)
    root: Path = dataclasses.field(repr=False)

    def folder_with(self, data: bytes) -> Path:
        folder = Path(tempfile.mkdtemp(dir=self.root))
        (folder / STATE_FILE).write_bytes(data)
        return folder


def _digest(batch) -> dict:
    return {"keys": [str(k) for k in batch["__keys__"]], "tokens": batch["tokens"].clone()}


@pytest.fixture(scope="module")
def resume(vqa_dataset, tokenizer, small_clip_processor, tmp_path_factory):
    from energon_plugins import EnergonMultiModalDataModule

    def make():
        return EnergonMultiModalDataModule(
            str(vqa_dataset.path),
            tokenizer,
            small_clip_processor,
            seq_length=300,
            num_workers=0,
            shuffle_buffer_size=4,
        )

    original = make()
    loader = original.train_dataloader()
    next(loader), next(loader)
    path = original.save_checkpoint(tmp_path_factory.mktemp("saved"))
    expected = _digest(next(loader))
    original.close()
    return Resume(
        path.read_bytes(), load_state_file(path), expected, make(), tmp_path_factory.mktemp("examples")
    )


def restore_outcome(resume: Resume, folder: Path) -> str:
    """``"refused"`` (a typed error) or ``"identical"`` (the next batch is the expected one);
    anything else fails the test. Memory is checked around the restore."""
    datamodule = resume.datamodule
    try:
        growth, raised = peak_rss_growth_mib(lambda: datamodule.load_checkpoint(folder))
        if growth is not None:
            assert growth < MEMORY_BOUND_MIB, f"restoring grew the resident memory by {growth:.0f} MiB"
        if raised is not None:
            assert isinstance(raised, EnergonPluginsError), repr(raised)
            return "refused"
        try:
            batch = next(datamodule.train_dataloader())
        except EnergonPluginsError:
            return "refused"
        digest = _digest(batch)
        assert digest["keys"] == resume.expected["keys"]
        assert torch.equal(digest["tokens"], resume.expected["tokens"])
        return "identical"
    finally:
        datamodule.close()  # the next example restores into a fresh loader


# --------------------------------------------------------------------------- random bytes
PREFIXES = st.sampled_from(
    [b"", b"PK\x03\x04", b"PK\x05\x06", b"\x80\x02", b"PK\x03\x04\x14\x00\x00\x00\x00\x00"]
)


@QUICK
@given(prefix=PREFIXES, body=st.binary(max_size=3000))
def test_random_bytes_are_refused(resume, prefix, body):
    folder = resume.folder_with(prefix + body)
    growth, raised = peak_rss_growth_mib(lambda: load_loader_state(folder, dp_rank=0))
    assert isinstance(raised, StateFileError), repr(raised)
    assert str(folder / STATE_FILE) in str(raised)
    if growth is not None:
        assert growth < MEMORY_BOUND_MIB


# --------------------------------------------------------------------------- mutated real states
@st.composite
def byte_mutations(draw, size: int):
    """A list of edits to a file of ``size`` bytes: overwrite, cut or insert."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["overwrite", "overwrite", "cut", "insert"]))
        at = draw(st.integers(0, size - 1))
        data = draw(st.binary(min_size=1, max_size=8))
        edits.append((kind, at, data))
    return edits


def apply_edits(raw: bytes, edits) -> bytes:
    data = bytearray(raw)
    for kind, at, new in edits:
        at = min(at, len(data))
        if kind == "overwrite":
            data[at : at + len(new)] = new
        elif kind == "cut":
            del data[at : at + len(new) * 16]
        else:
            data[at:at] = new
    return bytes(data)


@RESTORING
@given(data=st.data())
def test_a_mutated_state_restores_exactly_or_is_refused(resume, data):
    edits = data.draw(byte_mutations(len(resume.raw)))
    mutated = apply_edits(resume.raw, edits)
    outcome = restore_outcome(resume, resume.folder_with(mutated))
    event(outcome)
    assert outcome in ("refused", "identical")


def value_paths(payload) -> list[tuple]:
    """Every path (a tuple of keys, indexes and attribute names) to a value under ``payload``."""
    paths, stack = [], [((), payload)]
    while stack:
        path, node = stack.pop()
        if path:
            paths.append(path)
        if isinstance(node, dict):
            stack.extend((path + (key,), value) for key, value in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((path + (index,), value) for index, value in enumerate(node))
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            stack.extend((path + (f".{f.name}",), getattr(node, f.name)) for f in dataclasses.fields(node))
    return sorted(paths, key=repr)


def replaced(payload, path, value):
    """A deep copy of ``payload`` with the value at ``path`` replaced (tuples rebuilt)."""
    payload = copy.deepcopy(payload)

    def put(node, rest):
        step, *rest = rest
        child = getattr(node, step[1:]) if isinstance(step, str) and step.startswith(".") else node[step]
        new_child = value if not rest else put(child, rest)
        if isinstance(node, tuple):
            return tuple(new_child if i == step else item for i, item in enumerate(node))
        if isinstance(step, str) and step.startswith("."):
            setattr(node, step[1:], new_child)
        else:
            node[step] = new_child
        return node

    return put(payload, list(path))


def _at(payload, path):
    node = payload
    for step in path:
        node = getattr(node, step[1:]) if isinstance(step, str) and step.startswith(".") else node[step]
    return node


OTHER_TYPES = [None, -1, 2**70, 1.5, "x", b"\x00", [], [1, "a"], {}, {"__class__": "Dataset"}, (1,), True]


@RESTORING
@given(data=st.data())
def test_a_value_of_another_type_is_refused_or_harmless(resume, data):
    paths = value_paths(resume.payload)
    path = data.draw(st.sampled_from(paths), label="path")
    old = _at(resume.payload, path)
    new = data.draw(
        st.sampled_from([v for v in OTHER_TYPES if type(v) is not type(old)]),
        label="value",
    )
    folder = Path(tempfile.mkdtemp(dir=resume.root))
    torch.save(replaced(resume.payload, path, new), folder / STATE_FILE)
    outcome = restore_outcome(resume, folder)
    event(outcome)
    assert outcome in ("refused", "identical")
