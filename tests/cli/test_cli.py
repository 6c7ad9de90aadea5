"""The `energon-plugins` command line: every verb through click's runner and as a real process.

The configs point at real Energon datasets written by the demo generator (webdataset shards
+ Energon's prepare index) and an offline tokenizer saved to disk.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from energon_plugins import hookimpl, load_registry, use_registry
from energon_plugins.cli import cli
from energon_plugins.errors import PluginNotFoundError

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
BUILTIN_EXAMPLES = [p for p in EXAMPLES if p.name in {"minimal.yaml", "packing.yaml", "full.yaml"}]
SCRIPT = pathlib.Path(sys.executable).with_name("energon-plugins")
HEAVY = {"torch", "transformers", "megatron"}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "120"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    """``site/.cache/demo`` (demo metadataset + tokenizer) and ``site/examples`` (copies)."""
    from energon_plugins.cli.demo_cmd import prepare_demo_data

    root = tmp_path_factory.mktemp("cli")
    prepare_demo_data(str(root / ".cache" / "demo"))
    (root / "examples").mkdir()
    for example in EXAMPLES:
        shutil.copy(example, root / "examples" / example.name)
    return root


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, *args: str, env: dict[str, str] | None = None):
    return runner.invoke(cli, list(args), catch_exceptions=True, env=env)


NOISE = re.compile(r"Warning|warnings\.warn|No CUDA runtime|it/s\]|^Except ", re.M)
"""What third-party noise looks like on stderr (warnings, logged hints, progress bars)."""


def assert_quiet(proc: subprocess.CompletedProcess) -> None:
    """A normal run prints only what the user asked for: no warning or progress bar."""
    noise = NOISE.search(proc.stderr)
    assert noise is None, proc.stderr[-3000:]


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=ENV, timeout=timeout)


# -- list --------------------------------------------------------------------------------------


def test_list_shows_every_builtin(runner):
    result = invoke(runner, "list", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in (
        "multimodal",
        "hf",
        "none",
        "first-fit-decreasing",
        "best-fit-decreasing",
        "greedy-knapsack",
    ):
        assert name in result.output
    for column in ("name", "kind", "distribution", "version", "description", "status"):
        assert column in result.output


def test_list_never_folds_a_plugin_name_on_a_narrow_terminal(runner):
    result = invoke(runner, "list", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for name in ("first-fit-decreasing", "best-fit-decreasing", "greedy-knapsack"):
        assert name in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_list_json_and_kind_filter(runner):
    rows = json.loads(invoke(runner, "list", "--json").output)
    assert {"name", "kind", "distribution", "version", "description", "status"} <= set(rows[0])
    assert {r["name"] for r in rows if r["kind"] == "task_encoder"} >= {"multimodal"}
    packing = json.loads(invoke(runner, "list", "--json", "--kind", "packing-strategy").output)
    assert packing and {r["kind"] for r in packing} == {"packing_strategy"}


class _BrokenPlugin:
    """A plugin whose hook raises: it must show up as failed without hiding the others."""

    @hookimpl
    def register_task_encoders(self, register):
        raise RuntimeError("boom: this plugin is broken on purpose")


def test_list_reports_a_failed_plugin_in_one_line(runner):
    registry = load_registry([_BrokenPlugin()], distribution="broken-dist")
    with use_registry(registry):
        result = invoke(runner, "list")
        rows = json.loads(invoke(runner, "list", "--json").output)
    assert result.exit_code == 0, result.output
    assert "failed" in result.output and "boom" in result.output
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and failed[0]["distribution"] == "broken-dist"
    assert "\n" not in failed[0]["error"] and "boom" in failed[0]["error"]
    assert any(r["name"] == "multimodal" and r["status"] == "ok" for r in rows)


# -- show --------------------------------------------------------------------------------------


def test_show_lists_options_types_defaults_and_aliases(runner):
    result = invoke(runner, "show", "multimodal")
    assert result.exit_code == 0, result.output
    for text in (
        "task_encoder",
        "energon-plugins",
        "default",
        "image_tokens",
        "truncation",
        "'right'",
        "Literal",
    ):
        assert text in result.output, text
    data = json.loads(invoke(runner, "show", "ffd", "--json").output)
    assert data[0]["name"] == "first-fit-decreasing" and "ffd" in data[0]["aliases"]
    assert {o["name"] for o in data[0]["options"]} >= {"sort", "overlong"}


def test_show_unknown_name_is_a_user_error_with_suggestion(runner):
    result = invoke(runner, "show", "multimodl")
    assert result.exit_code == 1
    assert "did you mean 'multimodal'" in result.output
    assert "Traceback" not in result.output
    debug = invoke(runner, "--debug", "show", "multimodl")
    assert isinstance(debug.exception, PluginNotFoundError)


def test_show_kind_restricts_the_search(runner):
    result = invoke(runner, "show", "hf", "--kind", "packing_strategy")
    assert result.exit_code == 1 and "packing_strategy" in result.output


def test_unknown_verb_suggests_the_closest(runner):
    result = invoke(runner, "lst")
    assert result.exit_code == 2 and "did you mean 'list'" in result.output


# -- validate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("example", BUILTIN_EXAMPLES, ids=[p.name for p in BUILTIN_EXAMPLES])
def test_every_example_validates(site, runner, example):
    result = invoke(runner, "validate", str(site / "examples" / example.name))
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


def test_builtin_examples_exist():
    assert {p.name for p in BUILTIN_EXAMPLES} == {"minimal.yaml", "packing.yaml", "full.yaml"}


def test_validate_prints_every_error_with_its_path(site, runner):
    config = site / "examples" / "broken.yaml"
    config.write_text(
        "path: ../.cache/demo/demo.yaml\ntokenizer: {path: ../.cache/demo/tokenizer}\n"
        "seq_lenght: 1\nmicro_batch_size: -1\ntask_encoder: {name: multimodl}\n"
        "packing: {name: ffd, options: {sortt: true}}\n"
    )
    result = invoke(runner, "validate", str(config))
    assert result.exit_code == 1
    for path in (
        "seq_lenght",
        "micro_batch_size",
        "task_encoder.name",
        "packing.options.sortt",
        "packing_buffer_size",
    ):
        assert f"  {path}: " in result.output, (path, result.output)
    assert "4 errors" not in result.output and "5 errors" in result.output
    data = json.loads(invoke(runner, "validate", str(config), "--json").output)
    assert data["valid"] is False and len(data["errors"]) == 5


def test_validate_set_overrides_before_checking(site, runner):
    config = str(site / "examples" / "minimal.yaml")
    assert invoke(runner, "validate", config, "--set", "seq_length=0").exit_code == 1
    # image_tokens 4 must agree with the 224 px processor: 2x2 patches of 112 px.
    result = invoke(
        runner,
        "validate",
        config,
        "--set",
        "task_encoder.options.image_tokens=4",
        "--set",
        "task_encoder.options.patch_size=112",
        "--set",
        "seq_length=64",
    )
    assert result.exit_code == 0 and "seq_length 64" in result.output


@pytest.mark.parametrize(
    "content,culprit",
    [
        (None, "does not exist"),
        ("path: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "mapping"),
    ],
)
def test_validate_file_errors_are_one_message_without_traceback(site, runner, content, culprit):
    config = site / "examples" / f"file-error-{abs(hash(culprit))}.yaml"
    if content is not None:
        config.write_text(content)
    result = invoke(runner, "validate", str(config))
    assert result.exit_code == 1
    assert culprit in result.output and "Traceback" not in result.output


# -- schema ------------------------------------------------------------------------------------


def test_schema_to_stdout_and_file_validates_the_examples(site, runner, tmp_path):
    result = invoke(runner, "schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    out = tmp_path / "schema.json"
    assert invoke(runner, "schema", "--output", str(out)).exit_code == 0
    assert json.loads(out.read_text()) == schema
    validator = jsonschema.Draft202012Validator(schema)
    for example in BUILTIN_EXAMPLES:
        data = yaml.safe_load(example.read_text())
        assert list(validator.iter_errors(data)) == [], example.name
    data = yaml.safe_load((REPO / "examples" / "packing.yaml").read_text())
    data["packing"]["options"]["sortt"] = True
    assert list(validator.iter_errors(data))


# -- preview / bench / demo --------------------------------------------------------------------


def layout_rows(output: str) -> dict[str, str]:
    """The key table ``preview`` prints before a batch: ``{key: "shape dtype-or-value"}``."""
    rows = {}
    for line in output.splitlines():
        match = re.fullmatch(r"  (\S+)\s{2,}(\(\d[\d, ]*\))?\s*(\S.*?)\s*", line)
        if match and match.group(1) != "key":
            rows.setdefault(match.group(1), f"{match.group(2) or ''} {match.group(3)}".strip())
    return rows


def test_preview_shows_the_batch_the_loop_gets_and_each_rows_record(site, runner, tmp_path):
    """By default the keys, shapes and dtypes are those of the configured batch format
    (megatron-bridge), equal to what the datamodule's training loader yields, and each row
    names the record it came from: the loader's ``__keys__``, in the loader's order."""
    from energon_plugins import build_datamodule

    config = site / "examples" / "minimal.yaml"
    page = tmp_path / "preview.html"
    result = invoke(runner, "preview", str(config), "-n", "3", "--html", str(page))
    assert result.exit_code == 0, result.output
    assert "<image x" in result.output and "⟦" in result.output
    assert "batch_format 'megatron-bridge'" in result.output
    shown = layout_rows(result.output)
    loader = build_datamodule(str(config), num_workers=0).train_dataloader()
    batches = [next(loader) for _ in range(3)]
    first = batches[0]
    assert set(shown) == set(first) - {"visual_inputs"} | {
        f"visual_inputs.{key}" for key in vars(first["visual_inputs"])
    }
    for key in ("tokens", "labels", "loss_mask", "position_ids", "attention_mask"):
        assert shown[key] == f"{tuple(first[key].shape)} {first[key].dtype}", key
    pixels = first["visual_inputs"].pixel_values
    assert shown["visual_inputs.pixel_values"] == f"{tuple(pixels.shape)} {pixels.dtype}"
    assert "num_images" not in shown and "pixel_values" not in shown  # the encoder's names
    records = re.findall(r"^record (\S+)(?: \(source [^)]*\))?$", result.output, re.MULTILINE)
    assert records == [key for batch in batches for key in batch["__keys__"]]
    html = page.read_text()
    assert html.count("data:image/png;base64,") >= 3
    assert "class='bar'" in html and "class='seg" in html and "loss" in html
    assert "<td><code>visual_inputs.pixel_values</code></td>" in html
    assert all(f"record <code>{key}</code>" in html for key in records)
    assert "<script" not in html and "http" not in html.replace("http-equiv", "")


def test_preview_raw_shows_the_task_encoders_batch(site, runner):
    result = invoke(runner, "preview", str(site / "examples" / "minimal.yaml"), "-n", "2", "--raw")
    assert result.exit_code == 0, result.output
    assert "the task encoder's batch (no batch format applied)" in result.output
    shown = layout_rows(result.output)
    assert shown["input_ids"].endswith("torch.int64") and shown["input_ids"].startswith("(1, ")
    assert shown["num_images"] == "(1,) torch.int64"
    assert shown["pixel_values"].startswith("(1, 3, ")
    assert "tokens" not in shown and "visual_inputs.pixel_values" not in shown
    assert len(re.findall(r"^record ((?:vqa|captioning)-\d+)$", result.output, re.MULTILINE)) == 2
    assert "<image x" in result.output and "⟦" in result.output


def test_preview_follows_the_configured_batch_format(site, runner):
    result = invoke(
        runner, "preview", str(site / "examples" / "minimal.yaml"), "-n", "1", "--set", "batch_format.name=hf"
    )
    assert result.exit_code == 0, result.output
    shown = layout_rows(result.output)
    assert set(shown) == {"input_ids", "attention_mask", "labels", "pixel_values"}
    assert re.search(r"^record (vqa|captioning)-\d+$", result.output, re.MULTILINE)  # no __keys__ in
    # the hf format: the record key comes from the task encoder's batch


def _packing_wired() -> bool:
    from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder

    return "select_samples_to_pack" in vars(PluginTaskEncoder) or any(
        "select_samples_to_pack" in vars(k)
        for k in PluginTaskEncoder.__mro__[1:-1]
        if k.__module__.startswith("energon_plugins")
    )


def test_preview_of_packed_rows_draws_one_bar_segment_per_sequence(site, runner, tmp_path):
    if not _packing_wired():
        pytest.skip("PluginTaskEncoder does not wire packing yet (packing issue)")
    page = tmp_path / "packed.html"
    result = invoke(
        runner, "preview", str(site / "examples" / "packing.yaml"), "-n", "2", "--html", str(page)
    )
    assert result.exit_code == 0, result.output
    assert "(packed)" in result.output and "segment 1" in result.output
    assert page.read_text().count("title='segment ") >= 3


def test_bench_json_reports_throughput_and_padding(site, runner):
    result = invoke(
        runner,
        "bench",
        str(site / "examples" / "minimal.yaml"),
        "--batches",
        "3",
        "--json",
        "--set",
        "micro_batch_size=2",
        "--set",
        "global_batch_size=2",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert data["batches"] == 3 and data["rows"] == 6 and data["samples"] == 6
    assert data["num_workers"] == 0 and data["hints"] and "num_workers: 2" in data["hints"][0]
    assert data["samples_per_second"] > 0 and data["tokens_per_second"] > 0
    assert 0.0 < data["padding_fraction"] < 1.0
    assert data["packing"] is False and data["fill_ratio"] is None


def test_bench_table_with_progress(site, runner):
    result = invoke(runner, "bench", str(site / "examples" / "minimal.yaml"), "--batches", "2")
    assert result.exit_code == 0, result.output
    for text in ("samples/s", "tokens/s", "padding fraction", "2/2"):
        assert text in result.output
    # 0 workers (minimal.yaml): one hint line under the table; stderr is not a terminal
    # here, so no start-up status was written
    hints = [line for line in result.output.splitlines() if line.startswith("hint:")]
    assert hints == [
        (
            "hint: num_workers: 0 loads in the training process; try num_workers: 2 "
            "or more (--set num_workers=2)"
        )
    ]
    assert "importing torch" not in result.output and "checking " not in result.output


def test_bench_hints_only_at_zero_workers():
    from energon_plugins.cli.bench_cmd import ZERO_WORKERS_HINT, hints

    assert hints({"num_workers": 0}) == [ZERO_WORKERS_HINT]
    assert hints({"num_workers": 2}) == [] and hints({"num_workers": 1}) == []


def test_bench_with_packing_reports_fill_ratio(site, runner):
    if not _packing_wired():
        pytest.skip("PluginTaskEncoder does not wire packing yet (packing issue)")
    result = invoke(runner, "bench", str(site / "examples" / "packing.yaml"), "--batches", "2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert data["packing"] is True and 0.0 < data["fill_ratio"] <= 1.0
    assert data["samples"] > data["rows"]  # several samples per packed row


def test_preview_of_invalid_config_builds_nothing(site, runner):
    result = invoke(
        runner, "preview", str(site / "examples" / "minimal.yaml"), "--set", "task_encoder.name=multimodl"
    )
    assert result.exit_code == 1 and "task_encoder.name" in result.output


def test_demo_prepare_only_writes_dataset_and_tokenizer(runner, tmp_path):
    result = invoke(runner, "demo", "--prepare-only", "--cache-dir", str(tmp_path / "d"), "--json")
    assert result.exit_code == 0, result.output
    paths = json.loads(result.output)
    assert pathlib.Path(paths["path"]).is_file()
    assert (pathlib.Path(paths["tokenizer"]) / "tokenizer_config.json").is_file()


# -- real processes ----------------------------------------------------------------------------


def test_subprocess_list_show_schema_validate(site):
    listed = run("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert any(row["name"] == "multimodal" for row in json.loads(listed.stdout))
    shown = run("show", "greedy-knapsack")
    assert shown.returncode == 0 and "overlong" in shown.stdout
    schema = run("schema")
    assert schema.returncode == 0 and json.loads(schema.stdout)["title"]
    valid = run("validate", str(site / "examples" / "minimal.yaml"))
    assert valid.returncode == 0, valid.stderr
    bad = site / "examples" / "bad-subprocess.yaml"
    bad.write_text("path: nowhere\ntokenizer: {path: ../.cache/demo/tokenizer}\nseq_length: -1\n")
    invalid = run("validate", str(bad))
    assert invalid.returncode == 1
    assert "path: " in invalid.stderr and "seq_length: " in invalid.stderr
    assert "Traceback" not in invalid.stderr
    module = subprocess.run(
        [sys.executable, "-m", "energon_plugins", "show", "nope"], capture_output=True, text=True, env=ENV
    )
    assert module.returncode == 1 and "Error:" in module.stderr
    assert "Traceback" not in module.stderr
    debug = run("--debug", "show", "nope")
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    for proc in (listed, shown, schema, valid, invalid, module):
        assert_quiet(proc)


@pytest.mark.slow
def test_subprocess_preview_bench_demo(site, tmp_path):
    page = tmp_path / "p.html"
    preview = run("preview", str(site / "examples" / "minimal.yaml"), "-n", "1", "--html", str(page))
    assert preview.returncode == 0, preview.stderr
    assert "<image x" in preview.stdout and page.is_file()
    bench = run("bench", str(site / "examples" / "minimal.yaml"), "--batches", "2", "--json")
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["samples"] == 2
    prepared = run("demo", "--prepare-only", "--cache-dir", str(tmp_path / "demo"))
    assert prepared.returncode == 0 and (tmp_path / "demo" / "demo.yaml").is_file()
    for proc in (preview, bench, prepared):
        assert_quiet(proc)


@pytest.mark.slow
def test_subprocess_full_demo(tmp_path):
    try:
        import energon_plugins.demo.run  # noqa: F401
    except ImportError:
        pytest.skip("energon_plugins.demo.run has not landed yet")
    env = {**ENV, "ENERGON_PLUGINS_CACHE": str(tmp_path / "cache")}
    result = subprocess.run(
        [str(SCRIPT), "demo", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_quiet(result)


def test_light_verbs_import_no_torch_transformers_or_megatron(site, tmp_path):
    config = site / "examples" / "minimal.yaml"
    code = (
        "import sys, io, contextlib\n"
        "from energon_plugins.cli import main\n"
        f"for argv in (['list'], ['list', '--json'], ['show', 'multimodal'], ['show', 'ffd'],\n"
        f"             ['validate', '--quick', {str(config)!r}], ['schema', '--output', {str(tmp_path / 's.json')!r}]):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit as exc:\n"
        "            assert not exc.code, (argv, exc.code)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_console_script_list_imports_no_heavy_module():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(SCRIPT), "list"], capture_output=True, text=True, env=ENV
    )
    assert result.returncode == 0, result.stderr[-2000:]
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "energon_plugins" in imported and "pluggy" in imported  # the probe works
    assert not imported & HEAVY, imported & HEAVY
    assert "pydantic" not in imported  # options models are named as strings: not imported
    assert "rich" not in imported  # the table is plain text (start-up time, issue 16)


def test_a_config_that_encodes_nothing_fails_with_a_message(site, runner):
    result = invoke(
        runner, "preview", str(site / "examples" / "minimal.yaml"), "-n", "1", "--set", "seq_length=16"
    )
    assert result.exit_code == 1, result.output
    assert "Error:" in result.output and "skipped" in result.output
    assert "Traceback" not in result.output


def test_list_columns_fold_to_the_width_and_keep_every_word():
    """The plain-text table of ``list``: no line wider than asked where the floors allow,
    names whole, and every word of a folded cell still there."""
    from energon_plugins.cli._columns import render_columns

    headers = ("name", "description", "load")
    rows = [
        (
            "first-fit-decreasing",
            "Longest first, each into the first pack where it fits (segment tree)",
            "2 ms",
        ),
        ("x", "short", "10 ms"),
    ]
    text = render_columns(headers, rows, width=48, folding={"description": 10}, right=frozenset({"load"}))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 48
    assert any(line.startswith("first-fit-decreasing ") for line in lines)
    assert " ".join(text.split()).count("segment tree") == 1
    assert any(line.endswith(" 2 ms") for line in lines) and any(line.endswith("10 ms") for line in lines)
    wide = render_columns(headers, rows, width=200, folding={"description": 10})
    assert len(wide.splitlines()) == 4  # header, rule, one line per row
