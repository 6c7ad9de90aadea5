"""``energon-plugins new-plugin``: the written distribution installs, is listed and passes its tests.

The full path (slow) runs the console script in a temporary folder, installs the result with
``pip install --no-deps --no-build-isolation --target`` (the venv stays untouched), lists it
with ``energon-plugins list --json`` and runs its own tests with pytest, all in subprocesses
that see the target folder through ``PYTHONPATH``.
"""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from energon_plugins.cli.main import cli
from energon_plugins.cli.new_plugin_cmd import new_plugin_command
from energon_plugins.scaffold import ScaffoldError, plugin_names, render

KINDS = {
    "task-encoder": ("task_encoder", "encoder", "check_task_encoder", "task_encoder"),
    "image-processor": ("image_processor", "processor", "check_image_processor", "image_processor"),
    "packing-strategy": ("packing_strategy", "strategy", "check_packing_strategy", "packing"),
    "batch-format": ("batch_format", "batch_format", "check_batch_format", "batch_format"),
    "source-format": ("source_format", "reader", "check_source_format", None),
}
BIN = Path(sys.executable).parent


def readme_selection(readme: str, config_key: str | None) -> tuple[str, dict]:
    """The plugin name and options the README's example selects: from its YAML config, or
    (a source format, ``config_key`` None) from its ``energon-plugins convert`` command."""
    if config_key is not None:
        config = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
        return config[config_key]["name"], config[config_key].get("options", {})
    command = readme.split("```bash\n", 2)[2].split("```", 1)[0].replace("\\\n", " ").split()
    assert command[:2] == ["energon-plugins", "convert"], command
    flags = list(zip(command, command[1:]))
    options = dict(value.split("=", 1) for flag, value in flags if flag == "-o")
    return dict(flags)["--from"], options


def run_verb(*args):
    return CliRunner().invoke(new_plugin_command, list(args), catch_exceptions=False)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_writes_a_complete_distribution(tmp_path, kind):
    canonical, module, check, config_key = KINDS[kind]
    result = run_verb("my-thing", "--kind", kind, "--output", str(tmp_path))
    assert result.exit_code == 0, result.output
    root = tmp_path / "energon-plugin-my-thing"
    assert f"Wrote {root}" in result.output
    # The install hint uses this interpreter's pip, not whatever `pip` is first on PATH.
    assert f"{sys.executable} -m pip install -e" in result.output
    assert "\n  pip install" not in result.output

    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "energon-plugin-my-thing"
    assert any(dep.startswith("energon-plugins") for dep in meta["project"]["dependencies"])
    assert meta["project"]["entry-points"]["energon_plugins"] == {
        "my_thing": "energon_plugin_my_thing.plugin"
    }
    package = root / "energon_plugin_my_thing"
    assert package.name.isidentifier()
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == sorted(
        [
            "README.md",
            "pyproject.toml",
            "tests/test_plugin.py",
            "energon_plugin_my_thing/__init__.py",
            "energon_plugin_my_thing/plugin.py",
            "energon_plugin_my_thing/options.py",
            f"energon_plugin_my_thing/{module}.py",
        ]
    )
    for path in root.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")  # every module is valid Python

    hooks = (package / "plugin.py").read_text()
    assert f'"energon_plugin_my_thing.{module}:build_' in hooks  # a lazy string factory
    assert "import torch" not in hooks and "import torch" not in (package / "options.py").read_text()
    assert "class MyThingOptions(BaseModel)" in (package / "options.py").read_text()
    tests = (root / "tests" / "test_plugin.py").read_text()
    assert f'{check}("my-thing"' in tests and tests.count("def test_") >= 2

    readme = (root / "README.md").read_text()
    assert "$" not in readme.replace("${", "")  # no template field left
    assert readme_selection(readme, config_key)[0] == "my-thing"


def test_task_encoder_example_subclasses_the_plugin_base(tmp_path):
    run_verb("vqa-demo", "--kind", "task-encoder", "-o", str(tmp_path))
    source = tmp_path / "energon-plugin-vqa-demo" / "energon_plugin_vqa_demo" / "encoder.py"
    text = source.read_text()
    assert "class VqaDemoTaskEncoder(PluginTaskEncoder[VQASample])" in text
    assert "@stateless\n    def encode_sample" in text


def test_an_existing_folder_is_never_overwritten(tmp_path):
    target = tmp_path / "energon-plugin-taken"
    target.mkdir()
    (target / "mine.txt").write_text("keep me")
    result = CliRunner().invoke(new_plugin_command, ["taken", "-o", str(tmp_path)])
    assert result.exit_code == 1
    assert "exists already" in result.output and "never overwrites" in result.output
    assert [p.name for p in target.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["energon-plugin-taken"]  # no leftovers


@pytest.mark.parametrize(
    "name, words",
    [
        ("My Thing!", "lowercase letters"),
        ("9lives", "starting with a letter"),
        ("a--b", "single '-'"),
        ("energon-plugin-foo", "without the 'energon-plugin-' prefix"),
        ("x" * 61, "at most 60"),
    ],
)
def test_bad_names_are_refused_clearly(tmp_path, name, words):
    result = CliRunner().invoke(new_plugin_command, [name, "-o", str(tmp_path)])
    assert result.exit_code == 1 and words in result.output, result.output
    assert repr(name) in result.output or name[:20] in result.output
    assert list(tmp_path.iterdir()) == []


def test_name_suggestion_and_derived_names():
    with pytest.raises(ScaffoldError, match="e.g. 'my-thing'"):
        plugin_names("My Thing!")
    names = plugin_names("fast_vqa2")
    assert (names.distribution, names.package, names.class_name, names.entry_point) == (
        "energon-plugin-fast-vqa2",
        "energon_plugin_fast_vqa2",
        "FastVqa2",
        "fast_vqa2",
    )


def test_builtin_names_are_refused_for_their_kind_only(tmp_path):
    result = CliRunner().invoke(new_plugin_command, ["multimodal", "-o", str(tmp_path)])
    assert result.exit_code == 1 and "built-in task_encoder 'multimodal'" in result.output
    result = CliRunner().invoke(
        new_plugin_command, ["ffd", "--kind", "packing-strategy", "-o", str(tmp_path)]
    )
    assert result.exit_code == 1 and "built-in packing_strategy" in result.output
    ok = run_verb("multimodal", "--kind", "packing_strategy", "-o", str(tmp_path))
    assert ok.exit_code == 0


def test_output_that_is_a_file_and_unknown_kind(tmp_path):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    result = CliRunner().invoke(new_plugin_command, ["abc", "-o", str(afile)])
    assert result.exit_code == 1 and "is a file" in result.output
    result = CliRunner().invoke(new_plugin_command, ["abc", "--kind", "tokenizer"])
    assert result.exit_code == 2 and "tokenizer" in result.output


def test_description_lands_in_the_registration(tmp_path):
    files = render("image-processor", plugin_names("pretty"), 'Fast "square" images')
    assert "description=\"Fast 'square' images\"" in files["energon_plugin_pretty/plugin.py"]
    assert "description = \"Fast 'square' images\"" in files["pyproject.toml"]


def test_the_verb_is_part_of_the_cli(tmp_path):
    result = CliRunner().invoke(cli, ["--help"])
    assert "new-plugin" in result.output
    result = CliRunner().invoke(
        cli, ["new-plugin", "via-group", "--kind", "packing-strategy", "-o", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "energon-plugin-via-group" / "pyproject.toml").exists()


# ------------------------------------------------------------------ the full path
def _env(site: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(site)
    env["HF_HUB_OFFLINE"] = "1"
    for var in ("ENERGON_PLUGINS_LOAD", "ENERGON_PLUGINS_DISABLE"):
        env.pop(var, None)
    return env


def _run(args, **kwargs):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_new_plugin_installs_is_listed_and_passes_its_own_tests(tmp_path, kind):
    canonical = KINDS[kind][0]
    name = f"kit-made-{kind.split('-')[0]}"
    _run([str(BIN / "energon-plugins"), "new-plugin", name, "--kind", kind, "-o", str(tmp_path)])
    root = tmp_path / f"energon-plugin-{name}"
    site = tmp_path / "site"
    _run(
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
            str(site),
            str(root),
        ]
    )
    package = plugin_names(name).package
    assert (site / package / "plugin.py").exists()
    assert not any(Path(p, package).exists() for p in sys.path if p and "site-packages" in p), (
        "the venv must stay untouched"
    )

    env = _env(site)
    listing = _run([str(BIN / "energon-plugins"), "list", "--json"], env=env, cwd=tmp_path)
    rows = [r for r in json.loads(listing.stdout) if r["name"] == name]
    assert rows == [
        {
            **rows[0],
            "kind": canonical,
            "distribution": f"energon-plugin-{name}",
            "version": "0.1.0",
            "status": "ok",
        }
    ]

    # the README's options validate against the plugin's own options model
    options = readme_selection((root / "README.md").read_text(), KINDS[kind][3])[1]
    probe = (
        "import json, sys, energon_plugins; "
        f"spec = energon_plugins.resolve({canonical!r}, {name!r}); "
        "print(json.dumps(spec.validate_options(json.loads(sys.argv[1])).model_dump(mode='json')))"
    )
    validated = json.loads(
        _run([sys.executable, "-c", probe, json.dumps(options)], env=env, cwd=tmp_path).stdout
    )
    assert {k: validated[k] for k in options} == options

    tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], env=env, cwd=root)
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    assert "skipped" not in tests.stdout
