"""The documentation site: it builds strictly, and it documents every hook, config key and verb.

The rule these tests enforce, so that a missing piece is caught:

1. ``mkdocs build --strict`` passes (broken links, missing anchors, pages outside the nav and
   unknown placeholders all fail it).
2. The GENERATED reference pages, as built, contain every hook spec (``register_*`` in
   ``energon_plugins/host/hookspecs.py``), every key of the config model (nested models
   recursively, as dotted keys), every option of every built-in plugin, every command of
   the click group with each of its options, and every class and function in
   ``energon_plugins.__all__``. The lists of names come from the code, not from
   the pages, so a renderer that drops something, or a ``:::`` entry nobody added to
   ``docs/reference/api.md``, fails here. The API reference is mkdocstrings', the CLI
   reference mkdocs-click's; ``docs_hooks`` renders the hook, config and built-ins lists.
3. The HAND-WRITTEN pages (everything under ``docs/`` except ``reference/`` and the example
   sources) mention every hook name, every top-level config key (as `` `key` ``, ``key:`` or
   ``key=``) and every CLI verb (as ``energon-plugins VERB``) at least once. A new hook, key
   or verb that nobody explained fails this test even though the generated reference lists it.
4. The quickstart and the guides link to the reference pages, and the troubleshooting page
   names every ``EnergonPluginsError`` subclass the package defines.
5. The example distributions the guides include (``docs/examples/*``) pass their own tests,
   their entry-point modules import no torch, and, "installed" as pip would leave them (a
   dist-info folder with their pyproject's entry points), their plugins show up in
   ``energon_plugins.available()`` with status ``ok``.
"""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from docs_hooks import references
from docs_hooks.model_tables import model_keys

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
MKDOCS = REPO / ".venv" / "bin" / "mkdocs"


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", NO_MKDOCS_2_WARNING="1")
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built with ``mkdocs build --strict`` into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    mkdocs = str(MKDOCS) if MKDOCS.exists() else str(Path(sys.executable).parent / "mkdocs")
    proc = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def page(site: Path, name: str) -> str:
    """The built HTML of the page ``name`` (``reference/hooks``; plain ``.html`` files)."""
    return (site / f"{name}.html").read_text(encoding="utf-8")


def hand_written() -> str:
    """The markdown of every hand-written page (not the generated references, not examples)."""
    texts = []
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS)
        if rel.parts[0] in ("reference", "examples"):
            continue
        texts.append(md.read_text(encoding="utf-8"))
    return "\n".join(texts)


def missing_in(names: list[str], text: str, pattern: str = "{name}") -> list[str]:
    """The names for which ``pattern`` (with ``{name}`` escaped) does not occur in ``text``."""
    return [name for name in names if not re.search(pattern.replace("{name}", re.escape(name)), text)]


def config_top_keys() -> list[str]:
    model = references.config_model()
    return [field.alias or name for name, field in model.model_fields.items()]


def cli_verbs() -> list[str]:
    """The verbs of the click group behind ``energon-plugins``."""
    import click

    from energon_plugins.cli.main import cli

    return cli.list_commands(click.Context(cli, info_name="energon-plugins"))


# ----------------------------------------------------------------------------- the build
def test_mkdocs_build_strict_passes(site: Path) -> None:
    """The build succeeded (the fixture asserts it) and produced every page of the nav."""
    for name in (
        "quickstart",
        "concepts",
        "troubleshooting",
        "guides/plugin-contract",
        "guides/task-encoder",
        "guides/image-processor",
        "guides/packing-strategy",
        "guides/batch-format",
        "loops/megatron-bridge",
        "loops/megatron-lm",
        "loops/hugging-face",
        "reference/hooks",
        "reference/config",
        "reference/builtins",
        "reference/cli",
        "reference/api",
    ):
        assert (site / f"{name}.html").is_file(), name


def test_no_placeholder_left_unexpanded(site: Path) -> None:
    for html in site.rglob("*.html"):
        assert "generated:" not in html.read_text(encoding="utf-8"), html


def test_theme_fetches_no_web_fonts(site: Path) -> None:
    assert "fonts.googleapis.com" not in page(site, "quickstart")


# ----------------------------------------------------------------------------- rule 2
def test_every_hook_is_in_the_hook_reference(site: Path) -> None:
    import energon_plugins.host.hookspecs as hookspecs

    names = [n for n in vars(hookspecs) if n.startswith("register_") and callable(getattr(hookspecs, n))]
    assert len(names) >= 3
    html = page(site, "reference/hooks")
    assert missing_in(names, html, 'id="{name}"') == []
    for name in names:  # the docstring's first line is rendered
        first = getattr(hookspecs, name).__doc__.strip().splitlines()[0]
        assert first in html, (name, first)


def test_every_config_key_is_in_the_config_reference(site: Path) -> None:
    model = references.config_model()
    keys = model_keys(model)
    # independent check of the recursion: every field of every nested model is listed
    assert set(config_top_keys()) <= set(keys)
    assert any("." in key for key in keys), "nested models must be flattened to dotted keys"
    html = page(site, "reference/config")
    assert missing_in(keys, html, "<code>{name}</code>") == []


def test_every_builtin_option_is_in_the_builtins_reference(site: Path) -> None:
    from energon_plugins.host.kinds import KINDS
    from energon_plugins.host.manager import load_registry
    from energon_plugins.host.registry import canonical_distribution

    registry = load_registry()
    html = page(site, "reference/builtins")
    core = [s for kind in KINDS for s in registry.specs(kind) if s.distribution == "energon-plugins"]
    assert {"multimodal", "hf", "none", "first-fit-decreasing"} <= {s.name for s in core}
    # the distributions under plugins/ that are installed here are documented too
    ours = references.repo_distributions()
    bundled = [
        s for kind in KINDS for s in registry.specs(kind) if canonical_distribution(s.distribution) in ours
    ]
    for spec in core + bundled:
        assert re.search(rf'id="{re.escape(spec.name)}(_\d+)?"', html), spec.name
        for field in spec.options.model_fields if spec.options else {}:
            assert f"<code>options.{field}</code>" in html, (spec.name, field)


def test_every_public_class_and_function_is_in_the_api_reference(site: Path) -> None:
    import inspect

    import energon_plugins

    names = [
        name
        for name in energon_plugins.__all__
        if inspect.isclass(getattr(energon_plugins, name))
        or inspect.isfunction(getattr(energon_plugins, name))
    ]
    assert "create" in names and "PluginTaskEncoder" in names
    html = page(site, "reference/api")  # mkdocstrings' heading of ::: energon_plugins.NAME
    assert missing_in(names, html, 'id="energon_plugins.{name}"') == []


def test_every_cli_verb_and_option_is_in_the_cli_reference(site: Path) -> None:
    import click

    from energon_plugins.cli.main import cli

    root = click.Context(cli, info_name="energon-plugins")
    verbs = cli.list_commands(root)
    html = page(site, "reference/cli")
    assert missing_in(verbs, html, 'id="{name}"') == []  # mkdocs-click's heading per verb
    assert missing_in(verbs, html, r"energon-plugins {name} \[OPTIONS\]") == []  # its usage
    for verb in verbs:
        command = cli.get_command(root, verb)
        for param in command.params:
            for opt in getattr(param, "opts", []) if isinstance(param, click.Option) else []:
                assert f"<code>{opt}</code>" in html, (verb, opt)


# ----------------------------------------------------------------------------- rule 3
def test_hand_written_pages_mention_every_hook() -> None:
    assert missing_in(references.hook_names(), hand_written()) == []


def test_hand_written_pages_mention_every_top_level_config_key() -> None:
    pattern = r"(`{name}`|(?<![\w.]){name}:|(?<![\w.]){name}=)"
    assert missing_in(config_top_keys(), hand_written(), pattern) == []


def test_hand_written_pages_mention_every_cli_verb() -> None:
    verbs = cli_verbs()
    assert verbs, "the click group has no commands"
    assert missing_in(verbs, hand_written(), r"energon-plugins {name}(?![\w-])") == []


def test_the_rule_catches_a_missing_name(site: Path) -> None:
    """The checks above would fail for a name nobody documented."""
    assert missing_in(["register_widgets"], page(site, "reference/hooks"), 'id="{name}"') == [
        "register_widgets"
    ]
    assert missing_in(["frobnicate"], hand_written(), r"energon-plugins {name}(?![\w-])") == ["frobnicate"]
    assert missing_in(["bogus_key"], hand_written(), r"(`{name}`|(?<![\w.]){name}:)") == ["bogus_key"]
    assert missing_in(["frobnicate"], page(site, "reference/api"), 'id="energon_plugins.{name}"') == [
        "frobnicate"
    ]
    assert missing_in(["frobnicate"], page(site, "reference/cli"), 'id="{name}"') == ["frobnicate"]


def test_the_site_opens_from_disk(site: Path) -> None:
    """``use_directory_urls: false``: every page is a plain ``.html`` file and links name it, so
    ``site/index.html`` opened as ``file://`` reaches every page (a link to ``quickstart/``
    would open a folder listing)."""
    index = page(site, "index")
    assert 'href="quickstart.html"' in index
    for html_file in site.rglob("*.html"):
        text = html_file.read_text(encoding="utf-8")
        folder_links = [
            href
            for href in re.findall(r'href="([^"#:]*)"', text)
            if href.endswith("/") or href in ("", ".", "..")
        ]
        assert folder_links == [], (html_file.relative_to(site), folder_links[:5])


def test_cli_reference_shows_no_click_internals(site: Path) -> None:
    """mkdocs-click 0.9 prints click 8.3's ``Sentinel.UNSET`` for an option without a default."""
    html = page(site, "reference/cli")
    assert "<code>--json</code>" in html
    assert "Sentinel" not in html


def test_pipeline_diagram_fits_the_page() -> None:
    """The concepts page's text diagrams fit the content column (no horizontal scrolling)."""
    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```text\n(.*?)```", text, re.S)
    assert any("training step" in block for block in blocks)
    for block in blocks:
        widest = max(block.splitlines(), key=len)
        assert len(widest) <= 80, widest


# ----------------------------------------------------------------------------- rule 4
@pytest.mark.parametrize(
    ("source", "targets"),
    [
        ("quickstart.md", ["reference/config.md", "reference/cli.md", "reference/builtins.md"]),
        ("guides/plugin-contract.md", ["../reference/hooks.md"]),
        ("guides/task-encoder.md", ["../reference/hooks.md", "../reference/builtins.md"]),
        ("guides/image-processor.md", ["../reference/hooks.md", "../reference/builtins.md"]),
        ("guides/packing-strategy.md", ["../reference/hooks.md", "../reference/builtins.md"]),
        ("guides/batch-format.md", ["../reference/hooks.md", "../reference/builtins.md"]),
        ("guides/source-format.md", ["../reference/hooks.md", "../reference/builtins.md"]),
    ],
)
def test_pages_link_to_the_references(source: str, targets: list[str]) -> None:
    text = (DOCS / source).read_text(encoding="utf-8")
    for target in targets:
        assert f"]({target}" in text, (source, target)


def test_contract_page_matches_the_code() -> None:
    """The register signature, BuildContext fields and EncodedSample fields the guides list."""
    import dataclasses
    import inspect

    from megatron.energon import Sample

    from energon_plugins import BuildContext, EncodedSample
    from energon_plugins.host.registry import Registry

    contract = (DOCS / "guides" / "plugin-contract.md").read_text(encoding="utf-8")
    register = Registry().register_callback("task_encoder", distribution="d", version="0", module="m")
    parts = []
    for param in inspect.signature(register).parameters.values():
        if param.kind is param.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        default = "" if param.default is param.empty else "=" + repr(param.default).replace("'", '"')
        parts.append(param.name + default)
    shown = ", ".join(parts)
    assert f"register({shown})" in contract, shown

    context_fields = [f.name for f in dataclasses.fields(BuildContext)]
    assert missing_in(context_fields, contract, "| `{name}` |") == []

    base = {f.name for f in dataclasses.fields(Sample)}
    sample_fields = [f.name for f in dataclasses.fields(EncodedSample) if f.name not in base]
    guide = (DOCS / "guides" / "task-encoder.md").read_text(encoding="utf-8")
    assert missing_in(sample_fields, guide, "`{name}`") == []


def yaml_blocks() -> list[tuple[str, str]]:
    """``(page, text)`` of every fenced yaml block in the hand-written pages."""
    blocks = []
    for md in sorted(DOCS.rglob("*.md")):
        if md.relative_to(DOCS).parts[0] in ("reference", "examples"):
            continue
        for match in re.finditer(r"```yaml\n(.*?)```", md.read_text(encoding="utf-8"), re.S):
            blocks.append((str(md.relative_to(DOCS)), match.group(1)))
    return blocks


def test_config_snippets_in_the_guides_are_valid() -> None:
    """Every yaml snippet uses real keys, real plugin names and valid options.

    Names of the guides' example plugins count as real (they are documented there); a snippet
    with ``path`` and ``tokenizer`` is a whole config and must validate against the model.
    """
    import yaml

    from energon_plugins.config.model import SELECTIONS
    from energon_plugins.host.manager import load_registry

    model = references.config_model()
    registry = load_registry()
    example_names = set()
    for py in EXAMPLES.rglob("plugin.py"):
        example_names |= set(re.findall(r'register\(\s*"([^"]+)"', py.read_text()))
    blocks = yaml_blocks()
    assert len(blocks) >= 5
    for where, text in blocks:
        data = yaml.safe_load(text)
        assert isinstance(data, dict), (where, text)
        assert set(data) <= set(model.model_fields), (where, set(data) - set(model.model_fields))
        if {"path", "tokenizer"} <= set(data):
            model.model_validate(data)
        for key, kind in SELECTIONS.items():
            selection = data.get(key)
            if not isinstance(selection, dict) or "name" not in selection:
                continue
            if selection["name"] in example_names:
                continue
            spec = registry.resolve(kind, selection["name"])
            spec.validate_options(selection.get("options") or {}, path=f"{key}.options")


def test_troubleshooting_names_every_error_class() -> None:
    """Every exception class users can catch has an entry (found by importing every module)."""
    import importlib
    import pkgutil

    import energon_plugins
    from energon_plugins.errors import EnergonPluginsError

    for info in pkgutil.walk_packages(energon_plugins.__path__, "energon_plugins."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)

    def subclasses(cls: type) -> set[type]:
        found = set(cls.__subclasses__())
        for sub in list(found):
            found |= subclasses(sub)
        return found

    names = sorted({c.__name__ for c in subclasses(EnergonPluginsError)})
    assert "PluginNotFoundError" in names
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    assert missing_in(names, text, "`{name}`") == []


# ----------------------------------------------------------------------------- rule 5
EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/pyproject.toml"))


def test_there_is_one_example_per_kind() -> None:
    hooks = set()
    for example in EXAMPLE_DIRS:
        for py in example.rglob("plugin.py"):
            hooks |= set(re.findall(r"def (register_\w+)\(register\)", py.read_text()))
    assert hooks == set(references.hook_names())


def test_example_distributions_pass_their_tests(tmp_path: Path) -> None:
    """The tests of every example distribution, in one interpreter (torch is imported once)."""
    env = _env() | {"PYTHONPATH": os.pathsep.join(map(str, EXAMPLE_DIRS))}
    proc = subprocess.run(  # cwd: a temporary folder, so hypothesis leaves nothing in docs/
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-rA",
            *(str(example / "tests") for example in EXAMPLE_DIRS),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    for example in EXAMPLE_DIRS:  # each example's tests ran
        assert f"{example.name}/tests/" in proc.stdout, example.name


@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_example_entry_point_is_import_light(example: Path) -> None:
    with (example / "pyproject.toml").open("rb") as fh:
        entry_points = tomllib.load(fh)["project"]["entry-points"]["energon_plugins"]
    assert entry_points
    for module in entry_points.values():
        code = (
            f"import sys, {module}\n"
            "heavy = [m for m in ('torch', 'transformers', 'megatron') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
        )
        env = _env() | {"PYTHONPATH": str(example)}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def install_like_pip(example: Path, site: Path) -> dict:
    """Write the dist-info pip would leave for ``example`` into ``site``; return its project."""
    with (example / "pyproject.toml").open("rb") as fh:
        project = tomllib.load(fh)["project"]
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    eps = project["entry-points"]["energon_plugins"]
    (dist_info / "entry_points.txt").write_text(
        "[energon_plugins]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
    )
    return project


@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_example_installed_shows_up_in_available(example: Path, tmp_path: Path) -> None:
    """The pyproject's entry point, as pip installs it, registers the example's plugins."""
    project = install_like_pip(example, tmp_path)
    registered = set()
    for py in example.rglob("plugin.py"):
        registered |= set(re.findall(r'register\(\s*"([^"]+)"', py.read_text()))
    assert registered
    code = (
        "import json, energon_plugins\n"
        "print(json.dumps([r.as_dict() for r in energon_plugins.available()]))\n"
    )
    env = _env() | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(example)])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

    rows = [r for r in json.loads(proc.stdout) if r["distribution"] == project["name"]]
    assert {r["name"] for r in rows} == registered, rows
    assert {r["status"] for r in rows} == {"ok"}, rows


@pytest.mark.slow
def test_examples_pass_the_conformance_kit(tmp_path: Path) -> None:
    """Installed (as pip would), the examples pass ``energon_plugins.testing``'s checks.

    This is what the plugin-contract page tells authors to run.
    """
    site_dir = tmp_path / "site-packages"
    for example in EXAMPLE_DIRS:
        install_like_pip(example, site_dir)
    test_file = tmp_path / "test_conformance.py"
    test_file.write_text(
        "from energon_plugins.testing import (\n"
        "    check_batch_format, check_image_processor, check_packing_strategy,\n"
        "    check_task_encoder)\n\n"
        "def test_captions():\n    check_task_encoder('captions', dataset_kind='captioning')\n\n"
        "def test_resize():\n    check_image_processor('resize')\n\n"
        "def test_next_fit():\n    check_packing_strategy('next-fit')\n\n"
        "def test_plain_torch():\n    check_batch_format('plain-torch', labels='next-token')\n"
    )
    env = _env() | {"PYTHONPATH": os.pathsep.join([str(site_dir), *map(str, EXAMPLE_DIRS)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_site_renders_offline(site: Path) -> None:
    """No page loads a script from the network (mermaid's CDN did) and no type in a table
    shows an escaped pipe (``int \\| None``)."""
    pages = {p.relative_to(site): p.read_text(encoding="utf-8") for p in site.rglob("*.html")}
    assert pages
    for name, text in pages.items():
        assert not re.search(r"<script[^>]+src=\"(https?:)?//", text), name
        assert 'class="mermaid"' not in text, name
        assert "\\|" not in re.sub(r"<pre.*?</pre>", "", text, flags=re.S), name
    assert "<code>int &#124; None</code>" in pages[Path("reference/config.html")]
