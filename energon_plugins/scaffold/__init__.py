"""Write a new plugin distribution (``energon-plugins new-plugin NAME --kind KIND``).

The result is a folder ``energon-plugin-NAME`` holding ``pyproject.toml`` (the entry point in
``[project.entry-points.energon_plugins]``), the package ``energon_plugin_NAME`` (the hook
module with a ``"module:attr"`` factory, a pydantic options model, a working component), a
README with a config example, and tests that use :mod:`energon_plugins.testing`. Once
``pip install -e``'d, the plugin appears in ``energon-plugins list`` and passes its own tests.

Templates are Python modules (``templates_*.py``) of :class:`string.Template` text, so they
ship inside the package without package-data settings.
"""

import dataclasses
import importlib
import keyword
import os
import re
import shutil
import string
import tempfile
from pathlib import Path

from energon_plugins.host.kinds import HOOK_FOR_KIND, normalize_kind

#: The CLI's spelling of each kind -> the template module.
TEMPLATES = {
    "task_encoder": "energon_plugins.scaffold.templates_task_encoder",
    "image_processor": "energon_plugins.scaffold.templates_image_processor",
    "packing_strategy": "energon_plugins.scaffold.templates_packing_strategy",
    "batch_format": "energon_plugins.scaffold.templates_batch_format",
    "source_format": "energon_plugins.scaffold.templates_source_format",
}

DIST_PREFIX = "energon-plugin-"
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
MAX_NAME_LENGTH = 60


class ScaffoldError(ValueError):
    """The plugin name, kind or output folder cannot be used (the CLI prints it as ``Error: ...``)."""


@dataclasses.dataclass(frozen=True)
class PluginNames:
    """Every name derived from the plugin name ``my-thing``."""

    name: str
    """The registered name (``my-thing``), what a config selects."""
    distribution: str
    """``energon-plugin-my-thing``."""
    package: str
    """``energon_plugin_my_thing``, a valid Python identifier."""
    class_name: str
    """``MyThing``, the prefix of the generated classes."""
    entry_point: str
    """``my_thing``, the entry point's name."""


def plugin_names(name: str) -> PluginNames:
    """Validate ``name`` and derive the distribution, package and class names from it.

    Raises:
        ScaffoldError: the name is empty, too long, not lowercase letters, digits and single
            ``-`` / ``_`` separators starting with a letter, or carries the
            ``energon-plugin-`` prefix.
    """
    if not isinstance(name, str) or not name.strip():
        raise ScaffoldError("plugin name: must not be empty (e.g. 'my-encoder')")
    if name.startswith(DIST_PREFIX) or name.startswith(DIST_PREFIX.replace("-", "_")):
        bare = name[len(DIST_PREFIX) :]
        raise ScaffoldError(
            f"plugin name {name!r}: give the plugin name without the {DIST_PREFIX!r} prefix "
            f"(e.g. {bare!r}); the distribution is named {DIST_PREFIX}NAME"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise ScaffoldError(f"plugin name {name!r}: at most {MAX_NAME_LENGTH} characters")
    if not _NAME_RE.match(name):
        suggestion = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        hint = f" (e.g. {suggestion!r})" if suggestion and _NAME_RE.match(suggestion) else ""
        raise ScaffoldError(
            f"plugin name {name!r}: use lowercase letters, digits and single '-' or '_' "
            f"between them, starting with a letter{hint}"
        )
    snake = name.replace("-", "_")
    package = f"energon_plugin_{snake}"
    if not package.isidentifier() or keyword.iskeyword(package):  # pragma: no cover - by regex
        raise ScaffoldError(f"plugin name {name!r}: gives the invalid package name {package!r}")
    class_name = "".join(part.capitalize() for part in re.split(r"[-_]", name))
    return PluginNames(
        name=name,
        distribution=f"{DIST_PREFIX}{name.replace('_', '-')}",
        package=package,
        class_name=class_name,
        entry_point=snake,
    )


def _check_builtin_clash(kind: str, name: str) -> None:
    """A name the core's built-ins already use for ``kind`` would be ambiguous."""
    from energon_plugins.host.manager import load_registry

    registry = load_registry(entry_points=False, modules=_builtin_modules())
    if name in registry.names(kind):
        raise ScaffoldError(
            f"plugin name {name!r}: the built-in {kind} {name!r} already has it; choose another"
        )


def _builtin_modules() -> list:
    from energon_plugins.builtins import (
        batch_formats,
        image_processors,
        packing,
        source_formats,
        task_encoders,
    )

    return [task_encoders, image_processors, packing, batch_formats, source_formats]


def render(kind: str, names: PluginNames, summary: str | None = None) -> dict[str, str]:
    """Return ``relative path -> file text`` of the plugin distribution for ``kind``."""
    from energon_plugins import __version__
    from energon_plugins.scaffold import templates_common as common

    kind = normalize_kind(kind)
    t = importlib.import_module(TEMPLATES[kind])
    kind_text = t.KIND_TEXT
    summary = summary or f"The {names.name} {kind_text}, an energon-plugins plugin."
    summary = " ".join(summary.split()).replace('"', "'").replace("\\", "/")
    fields = {
        "name": names.name,
        "distribution": names.distribution,
        "package": names.package,
        "class_name": names.class_name,
        "entry_point": names.entry_point,
        "summary": summary,
        "kind": kind,
        "kind_text": kind_text,
        "core_version": __version__,
        "module": t.MODULE,
        "module_text": t.MODULE_TEXT,
        "check": t.CHECK,
        "hook": HOOK_FOR_KIND[kind],
        "factory": t.FACTORY,
    }

    def fill(text: str) -> str:
        return string.Template(text).substitute(fields)

    fields["config_intro"] = fill(t.CONFIG_INTRO)
    fields["config_example"] = fill(t.CONFIG_EXAMPLE)
    fields["options_table"] = fill(t.OPTIONS_TABLE)
    fields["usage"] = fill(getattr(t, "USAGE", common.CONFIG_USAGE))
    pkg = names.package
    return {
        "pyproject.toml": fill(common.PYPROJECT),
        "README.md": fill(common.README),
        f"{pkg}/__init__.py": fill(common.PACKAGE_INIT),
        f"{pkg}/plugin.py": fill(common.PLUGIN),
        f"{pkg}/options.py": fill(t.OPTIONS),
        f"{pkg}/{t.MODULE}.py": fill(t.COMPONENT),
        "tests/test_plugin.py": fill(t.TESTS),
    }


def write_plugin(
    name: str, kind: str, output: str | os.PathLike = ".", *, summary: str | None = None
) -> Path:
    """Write the plugin distribution ``energon-plugin-NAME`` under ``output``; return its folder.

    Nothing is written if anything is wrong: the files go to a temporary folder beside the
    target first, which is renamed into place at the end.

    Raises:
        ScaffoldError: the name is invalid or taken by a built-in, the kind is unknown, the
            target folder exists already (it is never overwritten), or ``output`` is a file.
    """
    names = plugin_names(name)
    try:
        kind = normalize_kind(kind)
    except ValueError as exc:
        raise ScaffoldError(f"--kind: {exc}") from None
    _check_builtin_clash(kind, names.name)
    parent = Path(output).expanduser()
    if parent.exists() and not parent.is_dir():
        raise ScaffoldError(f"--output {str(parent)!r} is a file, not a folder")
    target = parent / names.distribution
    if target.exists() or target.is_symlink():
        raise ScaffoldError(
            f"{str(target)!r} exists already; new-plugin never overwrites a folder (remove it "
            "or choose another --output)"
        )
    files = render(kind, names, summary)
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{names.distribution}-", dir=parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        staging.chmod(0o755)
        os.rename(staging, target)  # refuses a non-empty folder that appeared meanwhile
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


__all__ = ["PluginNames", "ScaffoldError", "plugin_names", "render", "write_plugin"]
