"""What every row of a bad-input table asserts: a clean refusal that names the culprit and
changes nothing on disk.

Tables of bad inputs live beside the layer they exercise (``tests/config/test_bad_inputs.py``,
``tests/loading/test_datamodule_arguments.py``, ...); each parametrized test carries the
``bad_input`` marker so that ``tests/project/test_bad_input_count.py`` can count the rows.
"""

import contextlib
import hashlib
import pathlib
from collections.abc import Iterator


def folder_digest(*roots: pathlib.Path) -> dict[str, str]:
    """A SHA-256 of every file under ``roots`` (or of ``roots`` themselves when they are files),
    keyed by path; symlinks are recorded by target, not followed."""
    digest: dict[str, str] = {}
    for root in map(pathlib.Path, roots):
        paths = [root] if not root.is_dir() else sorted(root.rglob("*"))
        for path in paths:
            if path.is_symlink():
                digest[str(path)] = "-> " + str(path.readlink())
            elif path.is_file():
                digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif path.is_dir():
                digest[str(path)] = "dir"
    return digest


@contextlib.contextmanager
def unchanged(*roots: pathlib.Path) -> Iterator[None]:
    """Assert that nothing under ``roots`` was created, removed or rewritten inside the block."""
    before = folder_digest(*roots)
    yield
    after = folder_digest(*roots)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a refused input changed files: {changed[:10]}"


def assert_refusal(output: str, *names: str, one_paragraph: bool = True) -> None:
    """The message names everything in ``names`` and shows no traceback; with
    ``one_paragraph`` it has no blank line (each problem is one paragraph)."""
    assert "Traceback" not in output, output
    for name in names:
        assert name in output, (name, output)
    if one_paragraph:
        assert "\n\n" not in output.strip(), output
