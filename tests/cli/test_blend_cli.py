"""``energon-plugins blend plan``: the verb on the demo blend, its table, JSON and refusals."""

import json

import pytest
import yaml
from click.testing import CliRunner

from energon_plugins.cli.main import cli
from tests._refusals import assert_refusal, unchanged


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo blend (VQA + captioning) and a config reading it at 0 workers."""
    from energon_plugins.cli.demo_cmd import prepare_demo_data

    root = tmp_path_factory.mktemp("blend-cli")
    paths = prepare_demo_data(str(root / "demo"))
    config = root / "config.yaml"
    config.write_text(
        f"path: {paths['path']}\ntokenizer:\n  path: {paths['tokenizer']}\nseq_length: 512\n"
        "micro_batch_size: 4\nnum_workers: 0\n"
    )
    return root, config, paths


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def test_plan_writes_the_weights_and_reports_them_as_json(demo, tmp_path):
    _, config, paths = demo
    out = tmp_path / "planned.yaml"
    result = run(
        "blend", "plan", str(config), "--share", "vqa=3", "--share", "captioning=1",
        "--samples", "12", "-o", str(out), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["output"] == str(out.resolve()) and report["tokens"] == "tokens"
    rows = {row["entry"]: row for row in report["entries"]}
    assert set(rows) == {"vqa", "captioning"}
    assert all(row["samples_measured"] >= 12 for row in rows.values())
    assert rows["vqa"]["token_share"] == 0.75 and rows["captioning"]["token_share"] == 0.25
    means = {e: row["mean_tokens"] for e, row in rows.items()}
    expected = (0.75 / means["vqa"]) / (0.75 / means["vqa"] + 0.25 / means["captioning"])
    assert rows["vqa"]["planned_weight"] == pytest.approx(expected, rel=1e-4)
    planned = yaml.safe_load(out.read_text())
    # written elsewhere, so the paths are rebased to the same folders
    weights = {e["path"].rsplit("/", 1)[-1]: e["weight"] for e in planned["splits"]["train"]["blend"]}
    assert weights == {e: row["planned_weight"] for e, row in rows.items()}
    assert out.read_text().startswith("# Planned by `energon-plugins blend plan`")


def test_plan_table_names_each_entry_and_the_file(demo):
    root, config, paths = demo
    result = run("blend", "plan", str(config), "--samples", "8", "--tokens", "loss_tokens")
    assert result.exit_code == 0, result.output
    for text in ("vqa", "captioning", "(shares of loss_tokens)", "mean/sample", "planned", "demo.plan.yaml"):
        assert text in " ".join(result.stdout.split()), text
    planned = root / "demo" / "demo.plan.yaml"
    assert planned.is_file()
    planned.unlink()


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "args, names",
    [
        (["--share", "vqa"], ["--share", "PATH=SHARE"]),
        (["--share", "vqa=1", "--share", "ocr=1"], ["share", "no blend entry 'ocr'"]),
        (["--share", "vqa=1"], ["share", "missing: captioning"]),
        (["--share", "vqa=-1", "--share", "captioning=1"], ["vqa", "not a positive number"]),
        (["--set", "path=@DATASET@"], ["path", "one dataset, not a metadataset blend"]),
    ],
    ids=["no-equals", "unknown-entry", "missing-entry", "negative", "single-dataset"],
)
def test_bad_plans_are_refused_naming_what_is_wrong(demo, args, names):
    root, config, paths = demo
    args = [a.replace("@DATASET@", str(root / "demo" / "vqa")) for a in args]
    with unchanged(root / "demo"):
        result = run("blend", "plan", str(config), "--samples", "4", *args)
    assert result.exit_code != 0
    assert_refusal(result.output, *names, one_paragraph="PATH=SHARE" not in names)  # click's usage block
