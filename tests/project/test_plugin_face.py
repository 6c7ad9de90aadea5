"""The plugin author's face: what ``energon_plugins`` and ``energon_plugins.testing`` export.

Plugins (their code and their tests) import only from those two modules
(docs/guides/plugin-contract.md, "What a plugin may import"); ``lint-imports`` checks the
plugins' packages, these tests also read their tests and check the face itself.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import energon_plugins
import energon_plugins.testing

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
FACE = {"energon_plugins": energon_plugins, "energon_plugins.testing": energon_plugins.testing}


def plugin_sources() -> list[Path]:
    """Every Python file of every plugin distribution (package and tests)."""
    return sorted(p for p in PLUGINS.rglob("*.py") if ".egg-info" not in p.parts[-2])


def core_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` for each import of ``energon_plugins`` in ``path``."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "energon_plugins":
            found += [(node.lineno, node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name, None)
                for alias in node.names
                if alias.name.split(".")[0] == "energon_plugins"
            ]
    return found


def test_the_plugins_are_found() -> None:
    names = {p.relative_to(PLUGINS).parts[0] for p in plugin_sources()}
    assert len(names) == 4, names
    assert any("/tests/" in p.as_posix() for p in plugin_sources())


@pytest.mark.parametrize("path", plugin_sources(), ids=lambda p: p.relative_to(PLUGINS).as_posix())
def test_plugin_imports_only_the_public_face(path: Path) -> None:
    wrong = []
    for line, module, name in core_imports(path):
        if module not in FACE:
            wrong.append(f"l.{line}: {module} is private")
        elif name is not None and name not in FACE[module].__all__:
            wrong.append(f"l.{line}: {module}.{name} is not in __all__")
    assert wrong == [], wrong


@pytest.mark.parametrize("module", sorted(FACE))
def test_every_public_name_resolves(module: str) -> None:
    face = FACE[module]
    assert len(set(face.__all__)) == len(face.__all__), "duplicate names in __all__"
    missing = [name for name in face.__all__ if getattr(face, name, None) is None]
    assert missing == []


def test_importing_the_face_stays_light() -> None:
    probe = (
        "import sys, energon_plugins, energon_plugins.testing; "
        "print(sorted(m for m in ('torch', 'transformers', 'megatron', 'PIL', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
