"""How ``run_all.py`` finds the benchmarks: the ``BENCHMARK`` declaration of each script.

A benchmark is a script ``benchmarks/<group>/<name>.py`` (neither starting with ``_``) that
declares, at module level, ``BENCHMARK = {"name": ..., "full": [...], "quick": [...], "output":
"file" | "stdout"}``, or a list of such (one script run several ways). The literal is read with
:func:`ast.literal_eval`, without importing the script (no heavy imports, no side effects).
``"file"``: the script takes ``--json PATH``; ``"stdout"``: ``--json`` prints the JSON.
"""

import ast
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from . import BENCHMARKS_DIR


class Declaration(BaseModel):
    """One ``BENCHMARK`` entry: its name, the arguments of a full and of a quick run, how its JSON
    comes back; ``script`` is not declared, :func:`declarations_in` sets it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str
    full: list[str]
    quick: list[str]
    output: Literal["file", "stdout"]
    script: Path = Path()


class DeclarationError(Exception):
    """A script's ``BENCHMARK`` cannot be read (the message names the script and the field)."""


def declarations_in(script: Path) -> list[Declaration]:
    """The ``BENCHMARK`` entries ``script`` declares at module level (none: an empty list)."""
    where = f"{script.parent.name}/{script.name}"
    try:
        tree = ast.parse(script.read_text(), filename=str(script))
    except SyntaxError as exc:
        raise DeclarationError(f"{where}: not valid Python (line {exc.lineno}): {exc.msg}") from None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if not any(isinstance(target, ast.Name) and target.id == "BENCHMARK" for target in targets):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (TypeError, ValueError):
            raise DeclarationError(f"{where}, line {node.lineno}: BENCHMARK must be a literal") from None
        entries = []
        for index, entry in enumerate(value if isinstance(value, list) else [value]):
            try:
                entries.append(Declaration.model_validate(entry))
            except ValidationError as exc:
                which = f"BENCHMARK[{index}]" if isinstance(value, list) else "BENCHMARK"
                problems = "; ".join(
                    f"field {'.'.join(map(str, error['loc'])) or '(the entry)'}: {error['msg']}"
                    for error in exc.errors()
                )
                raise DeclarationError(f"{where}, line {node.lineno}: {which}: {problems}") from None
        return [entry.model_copy(update={"script": script}) for entry in entries]
    return []


def discover(root: Path = BENCHMARKS_DIR) -> tuple[dict[str, Declaration], list[Path]]:
    """Every benchmark declared in ``root/<group>/<name>.py`` by name, and the scripts there
    that declare none (folders and files starting with ``_`` are private: skipped)."""
    found: dict[str, Declaration] = {}
    undeclared = []
    for script in sorted(root.glob("*/*.py")):
        if script.parent.name.startswith(("_", ".")) or script.name.startswith("_"):
            continue
        declarations = declarations_in(script)
        undeclared += [] if declarations else [script]
        for declaration in declarations:
            if declaration.name in found:
                first = found[declaration.name].script.relative_to(root)
                raise DeclarationError(
                    f"benchmark {declaration.name!r} declared twice: {first} and {script.relative_to(root)}"
                )
            found[declaration.name] = declaration
    return found, undeclared
