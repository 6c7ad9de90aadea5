"""What the reference pages list that no documentation tool knows: from the code, at build time.

- ``config``: every key of the config file (``energon_plugins.config.DataModuleConfig``, nested
  models flattened to dotted keys), as one table.
- ``hooks``: one section per hook spec (``register_*`` in ``energon_plugins/host/hookspecs.py``)
  with the kind it registers; the signature and docstring come from mkdocstrings (the section
  holds a ``:::`` directive that mkdocstrings expands after this hook has run).
- ``builtins``: the plugins the registry holds from the core and from the distributions under
  ``plugins/`` in this repository, with their options tables.

Pure functions returning markdown, shared by the mkdocs hook (:mod:`docs_hooks.generate`) and
``tests/project/test_docs.py``. Nothing here runs at import time.
"""

import inspect
import tomllib
from pathlib import Path
from typing import Any

from docs_hooks.model_tables import _cell, first_paragraph, render_model_table

REPO = Path(__file__).resolve().parent.parent

KIND_TITLES = {
    "task_encoder": "Task encoders",
    "image_processor": "Image processors",
    "packing_strategy": "Packing strategies",
    "batch_format": "Batch formats",
    "source_format": "Source formats",
}
"""The section title of each plugin kind on the built-ins page."""


def config_model() -> type:
    """The pydantic model of the whole config file."""
    from energon_plugins.config import DataModuleConfig

    return DataModuleConfig


def render_config_reference() -> str:
    """The config reference: every key of the config model (nested models flattened)."""
    model = config_model()
    intro = (
        f"Generated from the pydantic model `energon_plugins.config.{model.__name__}` at build "
        "time. Every model forbids unknown keys; a dotted key such as "
        "`sample_config.image_token` is a nested mapping in the file. The `options` of each "
        "`{name, options}` selection are validated against the selected plugin's own options "
        "model ([Built-in plugins](builtins.md))."
    )
    return f"{intro}\n\n{first_paragraph(model.__doc__)}\n\n{render_model_table(model)}\n"


def hook_names() -> list[str]:
    """The hook specs' names (``register_*``), in source order."""
    from energon_plugins.host import hookspecs

    found = [
        (fn.__code__.co_firstlineno, name)
        for name, fn in vars(hookspecs).items()
        if name.startswith("register_") and callable(fn) and fn.__module__ == hookspecs.__name__
    ]
    return [name for _, name in sorted(found)]


def render_hook_reference() -> str:
    """The register contract (the module docstring), then one section per hook spec."""
    from energon_plugins.host import hookspecs
    from energon_plugins.host.kinds import HOOK_FOR_KIND

    kind_of = {hook: kind for kind, hook in HOOK_FOR_KIND.items()}
    module = hookspecs.__name__
    out = [
        "Generated from `energon_plugins/host/hookspecs.py` at build time. Each hook is a",
        "function a plugin module implements, decorated with `@energon_plugins.hookimpl`:",
        "",
        "```python",
        "@hookimpl",
        "def register_task_encoders(register): ...",
        "```",
        "",
        "## The `register` callable",
        "",
        f"::: {module}",
        "    options:",
        "      show_root_heading: false",
        "      members: false",
        "",
    ]
    for name in hook_names():
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        out += [
            f"## `{name}`",
            "",
            f"Kind: `{kind_of.get(name, '?')}`",
            "",
            "```python",
            f"@hookimpl\ndef {name}({params}) -> None",
            "```",
            "",
            f"::: {module}.{name}",
            "    options:",
            "      show_root_heading: false",
            "      show_root_toc_entry: false",
            "",
        ]
    return "\n".join(out)


def repo_distributions() -> set[str]:
    """The core and the distributions under ``plugins/`` (canonical names)."""
    from energon_plugins.host.registry import canonical_distribution

    names = {"energon-plugins"}
    for pyproject in sorted((REPO / "plugins").glob("*/pyproject.toml")):
        with pyproject.open("rb") as fh:
            names.add(canonical_distribution(tomllib.load(fh)["project"]["name"]))
    return names


def documented_specs(registry: Any) -> list[Any]:
    """Registered specs of the core and of this repository's plugin distributions, core first."""
    from energon_plugins.host.kinds import KINDS
    from energon_plugins.host.registry import canonical_distribution

    ours = repo_distributions()
    specs = []
    for kind in KINDS:
        kind_specs = [s for s in registry.specs(kind) if canonical_distribution(s.distribution) in ours]
        specs += sorted(kind_specs, key=lambda s: (s.distribution != "energon-plugins", s.distribution))
    return specs


def _render_spec(spec: Any) -> list[str]:
    """One plugin's section: description, distribution, aliases, factory and options."""
    aliases = ", ".join(f"`{a}`" for a in spec.aliases) or "none"
    factory = (
        spec.factory
        if isinstance(spec.factory, str)
        else (f"{spec.factory.__module__}:{spec.factory.__qualname__}")
    )
    out = [
        f"### `{spec.name}`",
        "",
        spec.description or "",
        "",
        f"- distribution: `{spec.distribution}` (select as `{spec.qualified_name}`)",
        f"- aliases: {aliases}",
        f"- factory: `{factory}`",
    ]
    if spec.options is None:
        return out + ["- options: none", ""]
    opts = spec.options
    out += [
        f"- options model: `{opts.__module__}.{opts.__qualname__}`",
        "",
        first_paragraph(opts.__doc__),
        "",
    ]
    if opts.model_fields:
        return out + [render_model_table(opts, prefix="options."), ""]
    return out + ["*(no options)*", ""]


def render_builtins() -> str:
    """Per-plugin options of every built-in and every distribution under ``plugins/``."""
    from energon_plugins.host.kinds import KINDS
    from energon_plugins.host.manager import load_registry
    from energon_plugins.host.registry import canonical_distribution

    registry = load_registry()
    specs = documented_specs(registry)
    ours = repo_distributions()
    failed = [f for f in registry.failures if canonical_distribution(f.distribution) in ours]
    out = [
        "Generated at build time from the registry: the core's built-ins and the distributions "
        "under `plugins/` in this repository (a distribution that is not installed, or that "
        "fails to load, is not listed). `energon-plugins show NAME` prints the same for any "
        "installed plugin.",
        "",
    ]
    if failed:
        out += ['!!! warning "Failed to load when this site was built"', ""]
        out += [f"    - `{_cell(f.summary)}`" for f in failed]
        out += [""]
    for kind in KINDS:
        out += [f"## {KIND_TITLES.get(kind, kind)}", ""]
        kind_specs = [s for s in specs if s.kind == kind]
        if not kind_specs:
            out += ["*(none installed)*", ""]
        for spec in kind_specs:
            out += _render_spec(spec)
    return "\n".join(out)


GENERATORS = {
    "hooks": render_hook_reference,
    "config": render_config_reference,
    "builtins": render_builtins,
}
"""Placeholder name (``<!-- generated:NAME -->`` in a page) -> renderer."""
