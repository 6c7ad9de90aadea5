"""Render reference pages from the code: hook specs, config models, plugin options, CLI.

Pure functions returning markdown, so the mkdocs hook (:mod:`docs_hooks.generate`) and the
documentation tests (``tests/test_docs.py``) share one source of truth for what must appear.
Nothing here runs at import time.
"""

import enum
import html
import inspect
import json
import re
import tomllib
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

CONTRACT_VERBS = ("list", "show", "validate", "schema", "preview", "bench", "demo", "new-plugin",
                  "convert")
"""The CLI verbs that /work/shared/DESIGN.md promises (shown as "not yet available" if absent)."""


# ----------------------------------------------------------------------------- helpers
def _cell(text: Any) -> str:
    """Escape text for one markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _code_cell(text: Any) -> str:
    """Text as code in a markdown table cell.

    A backtick code span would show an escaped pipe (``int \\| None``) with its backslash, so
    the cell holds an HTML ``<code>`` element with the pipe as an entity.
    """
    escaped = html.escape(str(text).replace("\n", " ").strip(), quote=False)
    return "<code>" + escaped.replace("|", "&#124;") + "</code>"


def format_annotation(annotation: Any) -> str:
    """A readable type: ``int | None``, ``Literal['right', 'drop']``, ``dict[str, Any]``."""
    if annotation is None or annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return format_annotation(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(format_annotation(a) for a in args)
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(format_annotation(a) for a in args)}]" if args else name
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b(typing|collections\.abc)\.", "", str(annotation))


def _constraints(field: Any) -> str:
    """``>= 1`` style constraints from a pydantic field's metadata."""
    parts = []
    for meta in getattr(field, "metadata", ()):
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
        min_length = getattr(meta, "min_length", None)
        if min_length:
            parts.append(f"min length {min_length}")
    return ", ".join(parts)


def _default(field: Any) -> str:
    """The default shown in a table (``required`` when there is none)."""
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:  # factories that take the validated data
            return "(computed)"
    else:
        value = field.default
    if hasattr(value, "model_dump"):
        return "see below" if type(value).model_fields else _code_cell("{}")
    if isinstance(value, enum.Enum):
        value = value.value
    return _code_cell(json.dumps(value) if _jsonable(value) else repr(value))


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def _nested_model(annotation: Any) -> type | None:
    """The pydantic model inside ``annotation`` (``Model``, ``Model | None``), if any."""
    import pydantic

    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def rst_to_md(text: str) -> str:
    """Turn the reST bits of our docstrings into markdown (roles, ``::`` literal blocks)."""
    text = re.sub(r":(?:class|func|meth|data|attr|mod|exc):`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return re.sub(r"::\n", ":\n", text)


def _doc(obj: Any) -> str:
    """The cleaned docstring of ``obj`` as markdown."""
    return rst_to_md(inspect.cleandoc(getattr(obj, "__doc__", None) or ""))


def _first_paragraph(doc: str | None) -> str:
    text = rst_to_md(inspect.cleandoc(doc or ""))
    return text.split("\n\n")[0].replace("\n", " ").strip()


def _field_description(model: type, name: str, field: Any) -> str:
    """The field's description, else its entry in the class docstring's ``Attributes:``."""
    if field.description:
        return field.description
    doc = inspect.cleandoc(model.__doc__ or "")
    match = re.search(rf"^\s+{re.escape(name)}:\s*(.+?)(?=^\s+\w+:|\Z)", doc, re.M | re.S)
    if match:
        return rst_to_md(" ".join(match.group(1).split()))
    nested = _nested_model(field.annotation)
    return _first_paragraph(nested.__doc__) if nested is not None else ""


# ----------------------------------------------------------------------------- models
def model_rows(model: type, prefix: str = "") -> Iterator[tuple[str, Any, type]]:
    """Yield ``(dotted key, field, owning model)`` for every field, nested models recursively."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        yield key, field, model
        nested = _nested_model(field.annotation)
        if nested is not None and nested is not model:
            yield from model_rows(nested, key + ".")


def model_keys(model: type) -> list[str]:
    """Every dotted key of ``model`` (what the config reference must list)."""
    return [key for key, _, _ in model_rows(model)]


def render_model_table(model: type, prefix: str = "") -> str:
    """A markdown table of key, type, default, constraints and description."""
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for key, field, owner in model_rows(model, prefix):
        nested = _nested_model(field.annotation)
        type_text = format_annotation(field.annotation)
        if nested is not None:
            type_text = type_text.replace(nested.__name__, f"{nested.__name__} (mapping)")
        description = _field_description(owner, key.rsplit(".", 1)[-1], field)
        constraints = _constraints(field)
        if constraints:
            description = f"{description} *({constraints})*".strip()
        lines.append(
            f"| `{key}` | {_code_cell(type_text)} | {_default(field)} | {_cell(description)} |"
        )
    return "\n".join(lines)


def config_model() -> tuple[type, str]:
    """The pydantic model of the whole config file, and its import path.

    Falls back to :class:`energon_plugins.MultiModalSampleConfig` while
    ``energon_plugins.config`` is not there.
    """
    try:
        from energon_plugins.config.model import DataModuleConfig

        return DataModuleConfig, "energon_plugins.config.DataModuleConfig"
    except ImportError:
        from energon_plugins import MultiModalSampleConfig

        return MultiModalSampleConfig, "energon_plugins.MultiModalSampleConfig"


def render_config_reference() -> str:
    """The config reference: every key of the config model (nested models flattened)."""
    model, where = config_model()
    intro = (
        f"Generated from the pydantic model `{where}` at build time. Every model forbids "
        "unknown keys; a dotted key such as `sample_config.image_token` is a nested mapping "
        "in the file. The `options` of each `{name, options}` selection are validated against "
        "the selected plugin's own options model ([Built-in plugins](builtins.md))."
    )
    doc = _doc(model)
    return f"{intro}\n\n{doc}\n\n{render_model_table(model)}\n"


# ----------------------------------------------------------------------------- hooks
def hook_names() -> list[str]:
    """The hook specs' names (``register_*``), in source order."""
    from energon_plugins.host import hookspecs

    names = []
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if fn.__module__ == hookspecs.__name__ and name.startswith("register_"):
            names.append((fn.__code__.co_firstlineno, name))
    return [name for _, name in sorted(names)]


def render_hook_reference() -> str:
    """Each hook's signature and docstring, plus the module docstring (the register contract)."""
    from energon_plugins.host import hookspecs
    from energon_plugins.host.kinds import HOOK_FOR_KIND

    kind_of = {hook: kind for kind, hook in HOOK_FOR_KIND.items()}
    out = [
        "Generated from the docstrings of `energon_plugins/host/hookspecs.py` at build time.",
        "",
        "## The `register` callable",
        "",
        _doc(hookspecs),
        "",
        "`Register` is `Callable[..., None]`; the hooks return nothing.",
        "",
    ]
    for name in hook_names():
        fn = getattr(hookspecs, name)
        params = ", ".join(
            f"{p.name}: {'Register' if p.annotation is hookspecs.Register else format_annotation(p.annotation)}"
            for p in inspect.signature(fn).parameters.values()
        )
        signature = f"@hookimpl\ndef {name}({params}) -> None"
        out += [
            f"## `{name}`",
            "",
            f"Kind: `{kind_of.get(name, '?')}`",
            "",
            "```python",
            signature,
            "```",
            "",
            _doc(fn) or "*(no docstring)*",
            "",
        ]
    return "\n".join(out)


# ----------------------------------------------------------------------------- plugins
def repo_distributions() -> set[str]:
    """The core and the distributions under ``plugins/`` (canonical names)."""
    from energon_plugins.host.registry import canonical_distribution

    names = {"energon-plugins"}
    for pyproject in sorted((REPO / "plugins").glob("*/pyproject.toml")):
        with pyproject.open("rb") as fh:
            names.add(canonical_distribution(tomllib.load(fh)["project"]["name"]))
    return names


def documented_specs(registry: Any = None) -> list[Any]:
    """Registered specs of the core and of this repository's plugin distributions."""
    from energon_plugins.host.kinds import KINDS
    from energon_plugins.host.manager import load_registry
    from energon_plugins.host.registry import canonical_distribution

    registry = registry if registry is not None else load_registry()
    ours = repo_distributions()
    core_first = lambda s: (s.distribution != "energon-plugins", s.distribution)  # noqa: E731
    specs = []
    for kind in KINDS:
        kind_specs = [
            s for s in registry.specs(kind) if canonical_distribution(s.distribution) in ours
        ]
        specs += sorted(kind_specs, key=core_first)
    return specs


KIND_TITLES = {
    "task_encoder": "Task encoders",
    "image_processor": "Image processors",
    "packing_strategy": "Packing strategies",
    "batch_format": "Batch formats",
    "source_format": "Source formats",
}


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
            aliases = ", ".join(f"`{a}`" for a in spec.aliases) or "none"
            factory = spec.factory if isinstance(spec.factory, str) else (
                f"{spec.factory.__module__}:{spec.factory.__qualname__}"
            )
            out += [
                f"### `{spec.name}`",
                "",
                spec.description or "",
                "",
                f"- distribution: `{spec.distribution}` (select as `{spec.qualified_name}`)",
                f"- aliases: {aliases}",
                f"- factory: `{factory}`",
            ]
            if spec.options is None:
                out += ["- options: none", ""]
            else:
                opts = spec.options
                out += [
                    f"- options model: `{opts.__module__}.{opts.__qualname__}`",
                    "",
                    _first_paragraph(opts.__doc__),
                    "",
                ]
                if opts.model_fields:
                    out += [render_model_table(opts, prefix="options."), ""]
                else:
                    out += ["*(no options)*", ""]
    return "\n".join(out)


# ----------------------------------------------------------------------------- CLI
def cli_group() -> Any:
    """The click group ``energon_plugins.cli.main:cli``."""
    from energon_plugins.cli.main import cli

    return cli


def _subcommands(group: Any, ctx: Any) -> dict[str, Any]:
    """``name -> command`` through ``list_commands``/``get_command`` (works for lazy groups)."""
    found = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None:
            found[name] = command
    return found


def cli_verbs() -> list[str]:
    """The command names of the click group, in the group's own order."""
    import click

    group = cli_group()
    return list(_subcommands(group, click.Context(group, info_name="energon-plugins")))


def _render_params(command: Any, ctx: Any) -> list[str]:
    import click

    rows = ["| Parameter | Type | Default | Help |", "|---|---|---|---|"]
    any_param = False
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and "--help" in param.opts:
            continue
        any_param = True
        if isinstance(param, click.Argument):
            label = f"`{param.human_readable_name}` (argument)"
            help_text = ""
        else:
            label = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            if param.metavar and not param.is_flag:
                label += f" `{param.metavar}`"
            help_text = param.help or ""
        if param.is_flag if isinstance(param, click.Option) else False:
            type_text = "flag"
        else:
            type_text = param.type.name if hasattr(param.type, "name") else str(param.type)
            if isinstance(param.type, click.Choice):
                type_text = " &#124; ".join(str(c) for c in param.type.choices)
        default = param.get_default(ctx, call=False)
        if getattr(param, "multiple", False):
            type_text += " (repeatable)"
        if (
            callable(default)
            or default is None
            or type(default).__name__ == "Sentinel"  # click >= 8.3: no default
            or default in ((), False, "")
        ):
            default_text = "" if not param.required else "**required**"
        else:
            default_text = f"`{default}`"
        if param.required and not default_text:
            default_text = "**required**"
        rows.append(f"| {label} | {type_text} | {default_text} | {_cell(help_text)} |")
    return rows if any_param else ["*(no parameters)*"]


def _render_command(command: Any, ctx: Any, path: str, level: int) -> list[str]:
    import click

    out = [
        f"{'#' * level} `{path}`",
        "",
        "```text",
        command.get_usage(ctx),
        "```",
        "",
        inspect.cleandoc(command.help or "").replace("\b\n", ""),
        "",
        *_render_params(command, ctx),
        "",
    ]
    if isinstance(command, click.Group):
        for name, sub in _subcommands(command, ctx).items():
            sub_ctx = click.Context(sub, info_name=name, parent=ctx)
            out += _render_command(sub, sub_ctx, f"{path} {name}", min(level + 1, 6))
    return out


def render_cli_reference() -> str:
    """Every command of the click group: usage, help and parameters."""
    import click

    group = cli_group()
    root = click.Context(group, info_name="energon-plugins")
    out = [
        "Generated from the click group `energon_plugins.cli.main:cli` at build time. "
        "Also runnable as `python -m energon_plugins`.",
        "",
        "## `energon-plugins`",
        "",
        "```text",
        group.get_usage(root),
        "```",
        "",
        inspect.cleandoc(group.help or ""),
        "",
        *_render_params(group, root),
        "",
    ]
    commands = _subcommands(group, root)
    for name, command in commands.items():
        ctx = click.Context(command, info_name=name, parent=root)
        out += _render_command(command, ctx, f"energon-plugins {name}", 2)
    missing = [v for v in CONTRACT_VERBS if v not in commands]
    if missing:
        out += [
            "## Not yet available",
            "",
            "The design promises these verbs; this build of the CLI does not have them yet: "
            + ", ".join(f"`{v}`" for v in missing)
            + ".",
            "",
        ]
    return "\n".join(out)


def render_missing_verbs(arg: str) -> str:
    """A warning admonition if any of the comma-separated CLI verbs is not in this build."""
    verbs = [v for v in arg.split(",") if v]
    have = set(cli_verbs())
    missing = [v for v in verbs if v not in have]
    if not missing:
        return ""
    names = ", ".join(f"`energon-plugins {v}`" for v in missing)
    return (
        f'!!! warning "Not yet available"\n    {names} is part of the design but not in this '
        "build of the CLI yet (the CLI reference lists the verbs that exist).\n"
    )


def render_missing_modules(arg: str) -> str:
    """A warning admonition if any of the comma-separated modules is not importable yet."""
    import importlib.util

    missing = []
    for name in (m for m in arg.split(",") if m):
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    if not missing:
        return ""
    names = ", ".join(f"`{m}`" for m in missing)
    return (
        f'!!! warning "Not yet available"\n    {names}: described here from the design, '
        "but not in this build yet.\n"
    )


def render_missing_methods(arg: str) -> str:
    """A warning if any ``module.Class.method`` is not defined by energon_plugins code yet.

    A method inherited from Energon (e.g. ``DefaultTaskEncoder.select_samples_to_pack``) does
    not count: the page describes what this project adds.
    """
    import importlib

    missing = []
    for path in (p for p in arg.split(",") if p):
        module_name, class_name, method = path.rsplit(".", 2)
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            fn = getattr(cls, method)
            ours = getattr(fn, "__module__", "").startswith("energon_plugins")
        except (ImportError, AttributeError):
            ours = False
        if not ours:
            missing.append(f"{class_name}.{method}")
    if not missing:
        return ""
    names = ", ".join(f"`{m}`" for m in missing)
    return (
        f'!!! warning "Not yet available"\n    {names}: described here from the design; in '
        "this build the base class still inherits Energon's default.\n"
    )


def render_missing_use(arg: str) -> str:
    """A warning unless each ``module:name`` pair's module source mentions ``name``.

    For features that exist as a helper but must also be wired in somewhere (e.g. the
    datamodule calling ``configure_pinning``).
    """
    import importlib.util

    missing = []
    for pair in (p for p in arg.split(",") if p):
        module_name, _, name = pair.partition(":")
        try:
            spec = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:
            spec = None
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is None or not origin.is_file() or name not in origin.read_text("utf-8"):
            missing.append(f"`{module_name}` using `{name}`")
    if not missing:
        return ""
    return (
        '!!! warning "Not yet wired in"\n    Described here from the design; in this build '
        + ", ".join(missing)
        + " is not there yet.\n"
    )


# ----------------------------------------------------------------------------- Python API
API_OBJECTS = (
    ("Selecting and building plugins", (
        "energon_plugins.available", "energon_plugins.resolve", "energon_plugins.create",
        "energon_plugins.BuildContext", "energon_plugins.PluginSpec", "energon_plugins.PluginInfo",
        "energon_plugins.LoadFailure",
    )),
    ("Registries (tests and tools)", (
        "energon_plugins.get_registry", "energon_plugins.reset_registry",
        "energon_plugins.use_registry", "energon_plugins.isolated_registry",
        "energon_plugins.load_registry", "energon_plugins.Registry",
    )),
    ("Task encoders", (
        "energon_plugins.PluginTaskEncoder", "energon_plugins.EncodedSample",
        "energon_plugins.MultiModalBatch", "energon_plugins.MultiModalSampleConfig",
        "energon_plugins.ConversationTemplate",
    )),
    ("Batch formats", (
        "energon_plugins.BatchFormat", "energon_plugins.VisualInputs",
        "energon_plugins.encoding.batch_formats.bridge.MegatronBridgeFormat",
        "energon_plugins.encoding.batch_formats.bridge.BridgeBatch",
        "energon_plugins.encoding.batch_formats.megatron_lm.MegatronLMFormat",
        "energon_plugins.encoding.batch_formats.hf.HFFormat",
        "energon_plugins.encoding.batch_formats.labels.next_token",
        "energon_plugins.encoding.batch_formats.labels.aligned_targets",
        "energon_plugins.encoding.batch_formats.labels.segment_starts",
        "energon_plugins.encoding.batch_formats.labels.mask_starts",
        "energon_plugins.encoding.packing.parallel.parallel_pad_multiple",
    )),
    ("Video (frame sampling, seek-based decoding, the visual budget)", (
        "energon_plugins.VideoOptions", "energon_plugins.VideoInfo",
        "energon_plugins.frame_count", "energon_plugins.frame_indices",
        "energon_plugins.read_video_info", "energon_plugins.decode_frames",
        "energon_plugins.SampledVideo", "energon_plugins.VideoDecodeError",
        "energon_plugins.budget_plans", "energon_plugins.VideoPlan",
    )),
    ("Datamodule and loader", (
        "energon_plugins.EnergonMultiModalDataModule", "energon_plugins.EnergonDataloader",
        "energon_plugins.ValidationLoader", "energon_plugins.cyclic_iter",
    )),
    ("Converting data (`energon-plugins convert`)", (
        "energon_plugins.convert_dataset", "energon_plugins.ConvertResult",
        "energon_plugins.SourceRecord", "energon_plugins.RecordError",
        "energon_plugins.convert.ConvertSettings",
    )),
    ("Errors", (
        "energon_plugins.EnergonPluginsError", "energon_plugins.PluginNotFoundError",
        "energon_plugins.PluginConflictError", "energon_plugins.PluginLoadError",
        "energon_plugins.PluginOptionsError", "energon_plugins.ConfigError",
        "energon_plugins.DatasetError", "energon_plugins.BatchFormatError",
        "energon_plugins.ConvertError",
    )),
    ("Testing kit for plugin authors (`energon_plugins.testing`)", (
        "energon_plugins.testing.pytest_plugin.energon_dataset",
        "energon_plugins.testing.pytest_plugin.isolated_registry",
        "energon_plugins.testing.pytest_plugin.build_context",
        "energon_plugins.testing.check_task_encoder",
        "energon_plugins.testing.check_image_processor",
        "energon_plugins.testing.check_packing_strategy",
        "energon_plugins.testing.check_batch_format",
        "energon_plugins.testing.batch_format.sample_batches",
        "energon_plugins.testing.batch_format.truth",
        "energon_plugins.testing.batch_format.next_token_examples",
        "energon_plugins.testing.batch_format.aligned_examples",
        "energon_plugins.testing.check_registration",
        "energon_plugins.testing.check_options",
        "energon_plugins.testing.default_context",
        "energon_plugins.testing.batch_differences",
        "energon_plugins.testing.write_crude_dataset",
        "energon_plugins.testing.video_frames",
        "energon_plugins.testing.encode_video",
        "energon_plugins.testing.decode_every_frame",
        "energon_plugins.testing.write_vidqa_dataset",
        "energon_plugins.testing.ConformanceError",
    )),
    ("Config files", (
        "energon_plugins.config.load_config", "energon_plugins.config.validate_config",
        "energon_plugins.config.check_config", "energon_plugins.config.apply_overrides",
        "energon_plugins.config.build_datamodule",
    )),
)
"""Sections of the Python API page: dotted names; a name that does not resolve is skipped."""

_SECTION = re.compile(r"^(Args|Arguments|Raises|Returns|Yields|Attributes|Example|Examples):\s*$")


def google_to_md(doc: str) -> str:
    """Render a Google-style docstring: prose as markdown, ``Args:`` etc. as bullet lists."""
    out: list[str] = []
    section = None
    for line in rst_to_md(inspect.cleandoc(doc or "")).splitlines():
        head = _SECTION.match(line)
        if head:
            section = head.group(1)
            out += ["", f"**{section}**", ""]
            continue
        if section and line.strip() and not line.startswith(" "):
            section = None
        if section:
            stripped = line.strip()
            entry = re.match(r"^    (\*{0,2}[\w.,` ]+?)(?: \(([^)]*)\))?:\s*(.*)$", line)
            if entry and not line.startswith("     "):
                name, kind, rest = entry.groups()
                kind_text = f" ({kind})" if kind else ""
                out.append(f"- `{name.strip('`')}`{kind_text}: {rest}")
            elif stripped and out and out[-1].startswith("- "):
                out[-1] += " " + stripped
            elif stripped:
                out.append(stripped)
            continue
        out.append(line)
    return "\n".join(out).strip()


def _resolve_dotted(dotted: str) -> Any:
    import importlib

    module_name, _, attr = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        return None


def _signature(obj: Any, name: str) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    if inspect.isclass(obj):
        params = [q for q in sig.parameters.values() if not q.name.startswith("__")]
        sig = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
    text = f"{name}{sig}"
    text = text.replace("(self, ", "(").replace("(self)", "()")
    text = re.sub(
        r"\b(?:typing|collections\.abc|pydantic\.main|energon_plugins(?:\.\w+)*)\.", "", text
    )
    return text


def _own_methods(cls: type) -> list[tuple[str, Any]]:
    methods = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        func = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if isinstance(member, property):
            func = member.fget
        if not callable(func) or not getattr(func, "__doc__", None):
            continue
        if name == "__init__":
            continue
        methods.append((name, member))
    return methods


def render_api() -> str:
    """The public Python API: signatures and docstrings of the names users and authors call."""
    out = ["Generated from the docstrings at build time.", ""]
    for title, names in API_OBJECTS:
        out += [f"## {title}", ""]
        for dotted in names:
            obj = _resolve_dotted(dotted)
            if obj is None:
                continue
            short = dotted.rsplit(".", 1)[1]
            if type(obj).__name__ == "FixtureFunctionDefinition":  # a pytest fixture
                out += [f"### fixture `{short}`", "", f"From `{dotted.rsplit('.', 1)[0]}` "
                        "(registered with pytest through the `pytest11` entry point).", "",
                        google_to_md(obj.__doc__ or ""), ""]
                continue
            kind = "class" if inspect.isclass(obj) else "function"
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            is_model = inspect.isclass(obj) and hasattr(obj, "model_fields")
            if is_model:
                header = f"class {short}(pydantic.BaseModel)"
            elif kind == "class":
                header = f"class {_signature(obj, short)}"
            else:
                header = f"def {_signature(obj, short)}"
            out += [f"### `{dotted}`", "", "```python", header, "```", "",
                    google_to_md(obj.__doc__ or ""), ""]
            if is_model:
                out += ["Fields:", "", render_model_table(obj), ""]
            if inspect.isclass(obj):
                for name, member in _own_methods(obj):
                    func = member.fget if isinstance(member, property) else getattr(obj, name)
                    label = f"{short}.{name}" + ("" if isinstance(member, property) else "()")
                    out += [f"#### `{label}`", ""]
                    if not isinstance(member, property):
                        out += ["```python", f"{_signature(func, name)}", "```", ""]
                    out += [google_to_md(func.__doc__ or ""), ""]
    return "\n".join(out)


GENERATORS = {
    "hooks": render_hook_reference,
    "config": render_config_reference,
    "builtins": render_builtins,
    "cli": render_cli_reference,
    "missing-verbs": render_missing_verbs,
    "missing-modules": render_missing_modules,
    "missing-methods": render_missing_methods,
    "missing-use": render_missing_use,
    "api": render_api,
}
"""Placeholder name (``<!-- generated:NAME -->`` or ``<!-- generated:NAME:ARG -->``) -> renderer.

``missing-verbs`` and ``missing-modules`` take an argument and render a warning only while
something the page describes is not built yet, so the pages never claim what does not exist.
"""
