"""The checks every plugin kind shares: registration and options (import-light).

Each rule has a short name (``registered``, ``options-defaults``, ...). A violation raises
:class:`ConformanceError` with the plugin's label and the rule in the message, e.g.
``task_encoder 'llava' (energon-plugin-llava) violates [options-unknown-key]: ...``.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from energon_plugins.host.registry import PluginSpec

#: Top-level packages that listing, resolving and validating must never import.
HEAVY_MODULES = ("torch", "transformers", "megatron")

#: An option key no plugin declares, used to check that unknown keys are rejected.
UNKNOWN_OPTION = "no_such_option_for_conformance"


class ConformanceError(AssertionError):
    """A plugin breaks its kind's contract; the message names the plugin and the rule."""

    def __init__(self, label: str, rule: str, detail: str) -> None:
        super().__init__(f"{label} violates [{rule}]: {detail}")
        self.label = label
        self.rule = rule
        self.detail = detail


def fail(label: str, rule: str, detail: str) -> None:
    """Raise :class:`ConformanceError` for ``label`` breaking ``rule``."""
    raise ConformanceError(label, rule, detail)


def _label(kind: str, name: str) -> str:
    return f"{kind} {name!r}"


def check_registration(kind: str, name: str) -> PluginSpec:
    """Check that ``name`` of ``kind`` is registered properly and return its spec.

    Rules: ``registered`` (the name resolves in the registry in use), ``listed`` (it appears
    in :func:`energon_plugins.available` with status ``ok`` and the same distribution),
    ``description`` (a non-empty description), ``distribution`` (it comes from an installed
    distribution that declares an ``energon_plugins`` entry point), ``load-failures`` (no
    module of that distribution failed to load).
    """
    from energon_plugins.errors import EnergonPluginsError
    from energon_plugins.host import api
    from energon_plugins.host.kinds import normalize_kind
    from energon_plugins.host.manager import get_registry

    kind = normalize_kind(kind)
    try:
        spec = api.resolve(kind, name)
    except EnergonPluginsError as exc:
        fail(_label(kind, name), "registered", str(exc))
    label = spec.label
    rows = [
        row for row in api.available(kind) if row.name == spec.name and row.distribution == spec.distribution
    ]
    if not rows:
        fail(label, "listed", "energon_plugins.available() does not list it")
    if rows[0].status != "ok":
        fail(label, "listed", f"available() reports status {rows[0].status!r}: {rows[0].error}")
    if not isinstance(spec.description, str) or not spec.description.strip():
        fail(
            label,
            "description",
            "register(...) was called without a description; `energon-plugins list` shows it to users",
        )
    _check_distribution(spec)
    failures = [
        f.summary
        for f in get_registry().failures
        if _canonical(f.distribution) == _canonical(spec.distribution)
    ]
    if failures:
        fail(label, "load-failures", "; ".join(failures))
    return spec


def _canonical(name: str) -> str:
    from energon_plugins.host.registry import canonical_distribution

    return canonical_distribution(name)


def _check_distribution(spec: PluginSpec) -> None:
    try:
        dist = importlib.metadata.distribution(spec.distribution)
    except importlib.metadata.PackageNotFoundError:
        fail(
            spec.label,
            "distribution",
            f"registered by {spec.distribution!r}, which is not an installed distribution; "
            "declare the hook module under [project.entry-points.energon_plugins] in "
            "pyproject.toml and install the distribution (pip install -e .)",
        )
    groups = {ep.group for ep in dist.entry_points}
    if "energon_plugins" not in groups:
        fail(
            spec.label,
            "distribution",
            f"distribution {spec.distribution!r} declares no energon_plugins entry point",
        )


def check_options(
    kind: str,
    name: str,
    options: Mapping[str, Any] | Any = None,
    *,
    subprocess_check: bool = True,
) -> Any:
    """Check the options contract of ``name`` and return ``options`` validated.

    Rules: ``options-defaults`` (no options validate: every field has a default),
    ``options-unknown-key`` (an unknown key is rejected with an error naming the plugin),
    ``options-given`` (the ``options`` handed in validate), ``options-schema`` (the model
    gives a JSON schema, which ``energon-plugins schema`` and ``show`` print),
    ``import-light`` (in a fresh interpreter, resolving the name and validating ``options``
    imports no torch, transformers or megatron).
    """
    from energon_plugins.errors import PluginOptionsError
    from energon_plugins.host.kinds import normalize_kind

    kind = normalize_kind(kind)
    from energon_plugins.host import api

    spec = api.resolve(kind, name)
    label = spec.label
    try:
        spec.validate_options(None)
    except PluginOptionsError as exc:
        fail(
            label,
            "options-defaults",
            f"the options do not validate with defaults (give every field a default): {exc}",
        )
    try:
        spec.validate_options({UNKNOWN_OPTION: 1})
    except PluginOptionsError as exc:
        if spec.name not in str(exc):
            fail(label, "options-unknown-key", f"the error does not name the plugin: {exc}")
    except Exception as exc:  # noqa: BLE001 - any other error type breaks the rule
        fail(
            label,
            "options-unknown-key",
            f"an unknown option raised {type(exc).__name__} instead of PluginOptionsError: {exc}",
        )
    else:
        fail(label, "options-unknown-key", f"the unknown option {UNKNOWN_OPTION!r} was accepted")
    try:
        validated = spec.validate_options(options)
    except PluginOptionsError as exc:
        fail(label, "options-given", str(exc))
    if spec.options is not None:
        try:
            json.dumps(spec.options.model_json_schema())
        except Exception as exc:  # noqa: BLE001
            fail(
                label,
                "options-schema",
                f"{spec.options.__name__}.model_json_schema() failed: {type(exc).__name__}: {exc}",
            )
    if subprocess_check:
        check_import_light(spec, validated)
    return validated


def check_and_build(kind: str, name: str, options: Any = None, context: Any = None) -> tuple:
    """The registration and options rules, then rule ``builds``: ``(spec, component)``.

    ``context`` defaults to an empty :class:`~energon_plugins.BuildContext`.
    """
    from energon_plugins.host.context import BuildContext
    from energon_plugins.host.manager import get_registry

    spec = check_registration(kind, name)
    validated = check_options(kind, name, options)
    try:
        component = get_registry().create(
            spec.kind, spec.qualified_name, validated, context if context is not None else BuildContext()
        )
    except Exception as exc:  # noqa: BLE001 - reported under the rule
        fail(spec.label, "builds", f"building failed: {type(exc).__name__}: {exc}")
    return spec, component


def _options_json(options: Any) -> Any:
    if options is None:
        return None
    dump = getattr(options, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    return dict(options)


_PROBE = r"""
import importlib, json, sys
from energon_plugins.errors import PluginNotFoundError
from energon_plugins.host.manager import load_registry
kind, name, distribution, module, options = json.loads(sys.argv[1])
registry = load_registry()
try:
    spec = registry.resolve(kind, f"{distribution}:{name}")
except PluginNotFoundError:
    registry = load_registry([importlib.import_module(module)], distribution=distribution)
    spec = registry.resolve(kind, f"{distribution}:{name}")
spec.validate_options(options)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print(json.dumps({"heavy": heavy, "options": spec.options.__name__ if spec.options else None}))
""" % (HEAVY_MODULES,)


def check_import_light(spec: PluginSpec, options: Any = None) -> None:
    """Rule ``import-light``: resolve and validate in a subprocess, which must import no torch.

    The subprocess sees the same ``sys.path`` (so distributions put there by a test count)
    and loads only the plugin's own distribution and the core (``ENERGON_PLUGINS_LOAD``).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # Only this plugin's distribution (and the core): another plugin's heavy import is not its fault.
    env["ENERGON_PLUGINS_LOAD"] = spec.distribution
    env.pop("ENERGON_PLUGINS_DISABLE", None)
    argument = json.dumps([spec.kind, spec.name, spec.distribution, spec.module, _options_json(options)])
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, argument],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        fail(spec.label, "import-light", f"resolving and validating in a fresh interpreter failed: {tail}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["heavy"]:
        top = sorted({m.split(".")[0] for m in result["heavy"]})
        fail(
            spec.label,
            "import-light",
            f"resolving and validating its options imported {', '.join(top)} "
            f"(hook module {spec.module}); keep the hook and options modules to pydantic and "
            "register the factory as a 'module:attr' string",
        )
