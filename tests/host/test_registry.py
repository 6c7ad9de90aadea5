"""The plugin host: discovery through real entry points, isolation, names, options, env vars."""

import pathlib
import re
import subprocess
import sys

import pydantic
import pytest

import energon_plugins
from energon_plugins import (
    BuildContext,
    PluginConflictError,
    PluginLoadError,
    PluginNotFoundError,
    PluginOptionsError,
    isolated_registry,
    load_registry,
)
from tests._dists import write_distribution

TOY_PLUGIN = """
from pydantic import BaseModel, Field
from energon_plugins import hookimpl

class ToyOptions(BaseModel):
    width: int = Field(default=4, ge=1)
    label: str = "toy"

class Packer:
    def select(self, lengths, capacity):
        return [[i] for i in range(len(lengths))]

@hookimpl
def register_task_encoders(register):
    register("toy", "toy_pkg.heavy:build", options=ToyOptions, description="A toy encoder",
             aliases=("toy-alias",))

@hookimpl
def register_packing_strategies(register):
    register("toy-pack", lambda options, context: Packer())
"""

TOY_HEAVY = """
from megatron.energon import DefaultTaskEncoder

class Toy(DefaultTaskEncoder):
    def __init__(self, options, context):
        super().__init__()
        self.options, self.context = options, context

def build(options, context):
    return Toy(options, context)
"""


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    """A site directory on sys.path where tests write distributions."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    for var in ("ENERGON_PLUGINS_LOAD", "ENERGON_PLUGINS_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    yield site
    for name in [m for m in sys.modules if m.split(".")[0] in {"toy_pkg", "dup_a", "dup_b", "bad_pkg"}]:
        del sys.modules[name]


def _toy(site):
    write_distribution(
        site,
        "energon-plugin-toy",
        version="2.3",
        modules={"toy_pkg.plugin": TOY_PLUGIN, "toy_pkg.heavy": TOY_HEAVY},
        entry_points={"toy": "toy_pkg.plugin"},
    )


def test_builtins_come_through_the_core_entry_points():
    registry = load_registry()
    rows = {(r.kind, r.name): r for r in registry.available()}
    assert rows[("task_encoder", "multimodal")].distribution == "energon-plugins"
    assert rows[("image_processor", "hf")].status == "ok"
    assert registry.resolve("task_encoder", "default").name == "multimodal"


def test_installed_distribution_is_discovered_and_built_lazily(plugin_path):
    _toy(plugin_path)
    registry = load_registry()
    row = next(r for r in registry.available("task_encoder") if r.name == "toy")
    assert (row.distribution, row.version, row.description) == ("energon-plugin-toy", "2.3", "A toy encoder")
    assert "toy_pkg.heavy" not in sys.modules, "listing must not import the factory module"

    context = BuildContext(seq_length=77)
    toy = registry.create("task_encoder", "toy", {"width": 9}, context)
    assert "toy_pkg.heavy" in sys.modules
    assert toy.options.width == 9 and toy.context.seq_length == 77
    assert registry.create("task_encoder", "toy-alias").options.width == 4
    assert registry.create("task_encoder", "energon-plugin-toy:toy").options.label == "toy"
    assert type(registry.create("packing_strategy", "toy-pack")).__name__ == "Packer"


def test_module_level_api_uses_the_isolated_registry(plugin_path):
    _toy(plugin_path)
    with isolated_registry() as registry:
        assert energon_plugins.get_registry() is registry
        assert "toy" in {r.name for r in energon_plugins.available("task_encoder")}
        assert energon_plugins.create("task_encoder", "toy").options.width == 4
    assert energon_plugins.get_registry() is not registry


def test_registry_is_cached_and_reset_reloads():
    energon_plugins.reset_registry()
    first = energon_plugins.get_registry()
    assert energon_plugins.get_registry() is first
    energon_plugins.reset_registry()
    assert energon_plugins.get_registry() is not first


@pytest.mark.parametrize(
    "module_source, stage, message",
    [
        ("raise RuntimeError('boom at import')", "import", "boom at import"),
        ("import sys; sys.exit(3)", "import", "SystemExit"),
        ("import not_a_module_anywhere", "import", "not_a_module_anywhere"),
        (
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_task_encoders(register):\n    raise ValueError('hook boom')\n",
            "register_task_encoders",
            "hook boom",
        ),
        (
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_task_encoders(reg, extra):\n    pass\n",
            "hookimpl",
            "register_task_encoders",
        ),
        (
            "from energon_plugins import hookimpl\n@hookimpl\ndef register_encoders(register):\n    pass\n",
            "hookimpl",
            "register_encoders",
        ),
        (
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_task_encoders(register):\n    register('a:b', len)\n",
            "register_task_encoders",
            "'a:b'",
        ),
        (
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_task_encoders(register):\n    register('x', 42)\n",
            "register_task_encoders",
            "factory must be",
        ),
        (
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_task_encoders(register):\n"
            "    register('x', len)\n    register('x', len)\n",
            "register_task_encoders",
            "registered twice",
        ),
        (
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_task_encoders(register):\n"
            "    register('early', len)\n    raise RuntimeError('late boom')\n",
            "register_task_encoders",
            "late boom",
        ),
    ],
    ids=[
        "raises",
        "sys-exit",
        "missing-import",
        "hook-raises",
        "bad-signature",
        "unknown-hook",
        "bad-name",
        "bad-factory",
        "same-name-twice",
        "registers-then-raises",
    ],
)
def test_broken_plugin_is_reported_and_the_others_keep_working(plugin_path, module_source, stage, message):
    _toy(plugin_path)
    write_distribution(
        plugin_path,
        "energon-plugin-bad",
        version="0.9",
        modules={"bad_pkg.plugin": module_source},
        entry_points={"bad": "bad_pkg.plugin"},
    )
    registry = load_registry()
    [failure] = registry.failures
    assert (failure.distribution, failure.version, failure.stage) == ("energon-plugin-bad", "0.9", stage)
    assert message in failure.error
    assert failure.traceback
    failed_rows = [r for r in registry.available("task_encoder") if r.status == "failed"]
    assert [r.distribution for r in failed_rows] == ["energon-plugin-bad"]
    assert message in failed_rows[0].error
    # A hook that fails leaves none of its registrations behind.
    assert [s.name for s in registry.specs("task_encoder") if s.distribution == "energon-plugin-bad"] == []
    # Everyone else still works.
    assert registry.create("task_encoder", "toy").options.width == 4
    assert registry.resolve("task_encoder", "multimodal").distribution == "energon-plugins"


def test_the_same_name_in_two_distributions_is_an_error_naming_both(plugin_path):
    for dist, pkg, value in (("dist-a", "dup_a", "A"), ("dist-b", "dup_b", "B")):
        write_distribution(
            plugin_path,
            dist,
            modules={
                f"{pkg}.plugin": "from energon_plugins import hookimpl\n"
                "@hookimpl\ndef register_image_processors(register):\n"
                f"    register('dup', lambda o, c: lambda **kw: {value!r})\n"
            },
            entry_points={"p": f"{pkg}.plugin"},
        )
    registry = load_registry()
    with pytest.raises(PluginConflictError) as info:
        registry.resolve("image_processor", "dup")
    assert "dist-a:dup" in str(info.value) and "dist-b:dup" in str(info.value)
    assert registry.create("image_processor", "dist-a:dup")() == "A"
    assert registry.create("image_processor", "dist_b:dup")() == "B"  # PEP 503 normalisation
    statuses = {r.distribution: r.status for r in registry.available("image_processor") if r.name == "dup"}
    assert statuses == {"dist-a": "conflict", "dist-b": "conflict"}


def test_load_and_disable_environment_variables(plugin_path, monkeypatch):
    _toy(plugin_path)
    names = lambda: {r.name for r in load_registry().available("task_encoder")}
    assert {"toy", "multimodal"} <= names()
    monkeypatch.setenv("ENERGON_PLUGINS_LOAD", "")
    assert names() == {"multimodal"}, "empty LOAD: no third-party plugins, built-ins stay"
    monkeypatch.setenv("ENERGON_PLUGINS_LOAD", "energon_plugin_toy, energon-plugin-llava")
    assert "toy" in names()
    monkeypatch.delenv("ENERGON_PLUGINS_LOAD")
    monkeypatch.setenv("ENERGON_PLUGINS_DISABLE", "energon-plugin-toy")
    assert "toy" not in names()


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("ENERGON_PLUGINS_DISABLED", "energon-plugin-toy", "did you mean 'ENERGON_PLUGINS_DISABLE'"),
        ("ENERGON_PLUGIN_LOAD", None, None),  # another prefix: not ours, not checked
        ("ENERGON_PLUGINS_LOAD", "energon-plugin-tyo", "did you mean 'energon-plugin-toy'"),
        ("ENERGON_PLUGINS_DISABLE", "energon-plugins", "core distribution"),
    ],
)
def test_environment_typos_are_errors_not_ignored(plugin_path, monkeypatch, variable, value, named):
    _toy(plugin_path)
    monkeypatch.setenv(variable, value or "x")
    if named is None:
        assert "toy" in {r.name for r in load_registry().available("task_encoder")}
        return
    with pytest.raises(energon_plugins.ConfigError, match=variable) as info:
        load_registry()
    assert named in str(info.value)


def test_unknown_name_suggests_and_lists_installed(plugin_path):
    _toy(plugin_path)
    registry = load_registry()
    with pytest.raises(PluginNotFoundError) as info:
        registry.resolve("task_encoder", "multimodel")
    text = str(info.value)
    assert "did you mean 'multimodal'" in text and "toy-alias" in text
    with pytest.raises(PluginNotFoundError, match="unknown task_encoder 'nope:toy'"):
        registry.resolve("task_encoder", "nope:toy")
    with pytest.raises(ValueError, match="unknown plugin kind"):
        registry.resolve("tokenizer", "x")


def test_options_are_validated_with_plugin_and_field_named(plugin_path):
    _toy(plugin_path)
    registry = load_registry()
    with pytest.raises(PluginOptionsError) as info:
        registry.create("task_encoder", "toy", {"width": "wide"})
    assert "task_encoder 'toy' (energon-plugin-toy)" in str(info.value)
    assert "options.width" in str(info.value)
    with pytest.raises(
        PluginOptionsError, match=r"options\.widht: unknown option \(did you mean 'width'\?\)"
    ):
        registry.create("task_encoder", "toy", {"widht": 3})
    with pytest.raises(PluginOptionsError, match="takes no options"):
        registry.create("packing_strategy", "toy-pack", {"x": 1})
    with pytest.raises(PluginOptionsError, match="must be a mapping"):
        registry.create("task_encoder", "toy", [1, 2])
    model = registry.resolve("task_encoder", "toy").options
    assert isinstance(model(width=3), pydantic.BaseModel)
    assert registry.create("task_encoder", "toy", model(width=3)).options.width == 3


def test_factory_errors_name_the_plugin(plugin_path):
    write_distribution(
        plugin_path,
        "energon-plugin-bad",
        modules={
            "bad_pkg.plugin": "from energon_plugins import hookimpl\n"
            "def explode(options, context):\n    raise RuntimeError('no GPU here')\n"
            "@hookimpl\ndef register_task_encoders(register):\n"
            "    register('ghost', 'bad_pkg.missing:build')\n"
            "    register('explodes', explode)\n"
        },
        entry_points={"bad": "bad_pkg.plugin"},
    )
    registry = load_registry()
    with pytest.raises(
        PluginLoadError,
        match=r"task_encoder 'ghost' \(energon-plugin-bad\): cannot import factory 'bad_pkg.missing:build'",
    ):
        registry.create("task_encoder", "ghost")
    with pytest.raises(
        PluginLoadError,
        match=r"'explodes' \(energon-plugin-bad\): building failed: RuntimeError: no GPU here",
    ):
        registry.create("task_encoder", "explodes")


def test_options_named_as_a_string_are_imported_on_first_use_only(plugin_path):
    """``options="module:attr"``: listing does not import the model; validating does; a bad
    reference is an error naming the plugin."""
    write_distribution(
        plugin_path,
        "energon-plugin-lazy",
        modules={
            "toy_pkg.plugin": "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_image_processors(register):\n"
            "    register('lazy', 'toy_pkg.heavy:build', options='toy_pkg.opts:LazyOptions')\n"
            "    register('broken', 'toy_pkg.heavy:build', options='toy_pkg.opts:Missing')\n",
            "toy_pkg.opts": "from pydantic import BaseModel\n"
            "class LazyOptions(BaseModel):\n    size: int = 3\n",
            "toy_pkg.heavy": "class Processor:\n"
            "    def __init__(self, size):\n        self.size = size\n"
            "    def __call__(self, images, **kwargs):\n        return images\n"
            "def build(options, context):\n    return Processor(options.size)\n",
        },
        entry_points={"lazy": "toy_pkg.plugin"},
    )
    registry = load_registry()
    assert {"lazy", "broken"} <= {r.name for r in registry.available("image_processor")}
    assert "toy_pkg.opts" not in sys.modules
    assert registry.create("image_processor", "lazy", {"size": 5}).size == 5
    assert registry.resolve("image_processor", "lazy").options.__name__ == "LazyOptions"
    with pytest.raises(PluginOptionsError, match="size"):
        registry.create("image_processor", "lazy", {"size": "five"})
    with pytest.raises(PluginLoadError, match=r"'broken' \(energon-plugin-lazy\): cannot import options"):
        registry.create("image_processor", "broken")


def test_import_has_no_side_effects_and_listing_is_light():
    code = (
        "import sys, energon_plugins, energon_plugins.host.manager as m\n"
        "assert m._cached is None, 'loaded at import'\n"
        "rows = energon_plugins.available()\n"
        "heavy = sorted({n.split('.')[0] for n in sys.modules}\n"
        "               & {'torch', 'transformers', 'megatron', 'pydantic'})\n"
        "print(len(rows), heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, heavy = out.stdout.strip().split(" ", 1)
    assert int(count) >= 2
    assert heavy == "[]"


def test_a_pip_installed_distribution_is_found_in_a_fresh_process(tmp_path):
    """The whole path a user takes: pip install a plugin project, then select it by name."""
    src = tmp_path / "src"
    write_distribution(
        src, "unused", modules={"toy_pkg.plugin": TOY_PLUGIN, "toy_pkg.heavy": TOY_HEAVY}, entry_points={}
    )
    for leftover in src.glob("*.dist-info"):
        for f in leftover.iterdir():
            f.unlink()
        leftover.rmdir()
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "energon-plugin-toy"\nversion = "3.1"\n'
        '[project.entry-points.energon_plugins]\ntoy = "toy_pkg.plugin"\n'
        '[tool.setuptools.packages.find]\ninclude = ["toy_pkg*"]\n'
    )
    target = tmp_path / "target"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        f"import sys; sys.path.insert(0, {str(target)!r})\n"
        "import energon_plugins as ep\n"
        "row = next(r for r in ep.available('task_encoder') if r.name == 'toy')\n"
        "print(row.distribution, row.version, ep.create('task_encoder', 'toy', {'width': 5}).options.width)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["energon-plugin-toy", "3.1", "5"]


def _image_processor_dist(root, dist, pkg, body):
    write_distribution(
        root,
        dist,
        modules={
            f"{pkg}.plugin": "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_image_processors(register):\n" + body
        },
        entry_points={"p": f"{pkg}.plugin"},
    )


def test_an_alias_claimed_by_two_distributions_is_listed_as_a_conflict(plugin_path):
    _image_processor_dist(plugin_path, "dist-a", "dup_a", "    register('alpha', len, aliases=('shared',))\n")
    _image_processor_dist(plugin_path, "dist-b", "dup_b", "    register('beta', len, aliases=('shared',))\n")
    rows = {r.name: r for r in load_registry().available("image_processor")}
    assert rows["alpha"].status == rows["beta"].status == "conflict"
    assert "'shared' also registered by dist-b" in rows["alpha"].error
    assert rows["hf"].status == "ok"


@pytest.mark.parametrize(
    ("kind", "hook", "returned", "expected"),
    [
        ("task_encoder", "register_task_encoders", "object()", "not a megatron.energon TaskEncoder"),
        ("image_processor", "register_image_processors", "42", "not callable"),
        ("packing_strategy", "register_packing_strategies", "[]", "select(lengths, capacity)"),
    ],
)
def test_a_factory_returning_the_wrong_kind_of_object_is_named(plugin_path, kind, hook, returned, expected):
    write_distribution(
        plugin_path,
        "energon-plugin-wrong",
        modules={
            "bad_pkg.plugin": "from energon_plugins import hookimpl\n"
            f"@hookimpl\ndef {hook}(register):\n    register('wrong', lambda o, c: {returned})\n"
        },
        entry_points={"p": "bad_pkg.plugin"},
    )
    with pytest.raises(PluginLoadError) as info:
        load_registry().create(kind, "wrong")
    assert f"{kind} 'wrong' (energon-plugin-wrong)" in str(info.value) and expected in str(info.value)


def test_load_time_is_measured_and_a_slow_plugin_is_pointed_out(plugin_path, monkeypatch):
    write_distribution(
        plugin_path,
        "energon-plugin-slow",
        modules={
            "slow_pkg.plugin": "import time\ntime.sleep(0.6)\n"
            "from energon_plugins import hookimpl\n"
            "@hookimpl\ndef register_image_processors(register):\n    register('slow', len)\n"
        },
        entry_points={"p": "slow_pkg.plugin"},
    )
    registry = load_registry()
    rows = {r.name: r for r in registry.available("image_processor")}
    assert rows["slow"].load_seconds >= 0.6
    assert rows["hf"].load_seconds < 0.6
    from click.testing import CliRunner

    from energon_plugins.cli.main import cli

    with energon_plugins.use_registry(registry):
        result = CliRunner().invoke(cli, ["list"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    # the figure is the measured time: 0.6 s or more on a loaded machine
    assert re.search(
        r"energon-plugin-slow takes (0\.[6-9]|[1-9][0-9]*(\.[0-9])?) s to load",
        " ".join(result.output.split()),
    ), result.output


def test_the_light_entry_point_reader_agrees_with_importlib_metadata(plugin_path, monkeypatch, tmp_path):
    """The dist-info / egg-info reader on the listing path finds what importlib.metadata
    finds, and hands over to it for layouts it does not read (an .egg distribution)."""
    from energon_plugins.host import entry_points as reader

    _toy(plugin_path)
    monkeypatch.setattr(
        sys, "path", [p for p in sys.path if p and not any(pathlib.Path(p).glob("*.egg-info"))]
    )
    key = lambda e: (e.distribution, e.version, e.name, e.value)
    for group in ("energon_plugins", "console_scripts", "pytest11"):
        light = sorted(reader._scan(group), key=key)
        assert light == sorted(reader._with_importlib_metadata(group), key=key), group
    assert ("energon-plugin-toy", "2.3", "toy", "toy_pkg.plugin") in {key(e) for e in light} | {
        key(e) for e in reader._scan("energon_plugins")
    }
    legacy = tmp_path / "energon_plugin_legacy.egg-info"  # what an editable build leaves
    legacy.mkdir()
    (legacy / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: energon-plugin-legacy\nVersion: 0.4\n\nLong description.\n"
    )
    (legacy / "entry_points.txt").write_text("[energon_plugins]\nlegacy = legacy_pkg.plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    light = sorted(reader._scan("energon_plugins"), key=key)
    assert light == sorted(reader._with_importlib_metadata("energon_plugins"), key=key)
    assert ("energon-plugin-legacy", "0.4", "legacy", "legacy_pkg.plugin") in {key(e) for e in light}
    (tmp_path / "zipped-1.0-py3.11.egg").write_bytes(b"")
    with pytest.raises(reader._Unusual):
        reader._scan("energon_plugins")
    assert {e.name for e in reader.entry_points("energon_plugins")} >= {"toy", "task_encoders", "legacy"}


@pytest.mark.parametrize("value", [True, 2.0, "8"])
def test_integer_options_are_strict_for_every_plugin(value):
    """``image_tokens: yes`` must not mean 1: a plain ``int`` field of any plugin's options
    model refuses booleans, floats and strings, nested models included."""
    registry = load_registry()
    with pytest.raises(PluginOptionsError, match=r"options\.image_tokens: must be an integer"):
        registry.create("task_encoder", "multimodal", {"image_tokens": value})
    spec = registry.resolve("task_encoder", "hf-processor")
    with pytest.raises(PluginOptionsError, match=r"options\.video\.num_frames: must be an integer"):
        spec.validate_options({"processor": "p", "video": {"num_frames": value}})
