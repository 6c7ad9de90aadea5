"""Bad command-line arguments of every verb, one table.

Each row runs ``energon-plugins VERB ARGS`` in-process (click's runner) in a scratch folder
holding a good config, a convert source and a plain file, and asserts a clean refusal that
changes nothing there: exit 2 with click's usage message for arguments click itself checks
(a missing argument, a value out of range, an unknown option), exit 1 with one ``Error:``
paragraph for those the verbs check; either way the message names the argument or the value
and shows no traceback. None of them imports torch or reads a dataset.
"""

from pathlib import Path

import pytest

from tests.config._bad_site import make_site, refused

USAGE = 2
"""Click's exit code for a usage error (its message has a ``Usage:`` paragraph, then ``Error:``)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer) -> Path:
    root = make_site(tmp_path_factory.mktemp("bad-cli-arguments"), vqa_dataset.path, tokenizer)
    (root / "records.json").write_text("[]", encoding="utf-8")
    (root / "file.txt").write_text("not a folder\n", encoding="utf-8")
    return root


CASES = [
    # (arguments, with {site} for the scratch folder; exit code; what the message names)
    # the group
    pytest.param(["valdate", "x.yaml"], USAGE, ["'valdate'", "did you mean 'validate'"], id="verb-typo"),
    pytest.param(["--verbose", "list"], USAGE, ["--verbose"], id="unknown-global-option"),
    # validate
    pytest.param(["validate"], USAGE, ["Missing argument", "CONFIG"], id="validate-no-config"),
    pytest.param(
        ["validate", "{site}/absent.yaml"], 1, ["absent.yaml", "does not exist"], id="validate-missing-config"
    ),
    pytest.param(["validate", "{site}"], USAGE, ["CONFIG", "is a directory"], id="validate-a-directory"),
    pytest.param(
        ["validate", "{site}/good.yaml", "--samples", "0"],
        USAGE,
        ["--samples", "0"],
        id="validate-samples-zero",
    ),
    pytest.param(
        ["validate", "{site}/good.yaml", "--samples", "x"],
        USAGE,
        ["--samples", "'x'"],
        id="validate-samples-text",
    ),
    pytest.param(
        ["validate", "{site}/good.yaml", "--quick", "--deep"],
        USAGE,
        ["--quick", "--deep"],
        id="validate-quick-and-deep",
    ),
    pytest.param(
        ["validate", "{site}/good.yaml", "--deeep"], USAGE, ["--deeep", "--deep"], id="validate-option-typo"
    ),
    pytest.param(
        ["validate", "{site}/good.yaml", "--set"],
        USAGE,
        ["--set", "requires an argument"],
        id="validate-set-without-value",
    ),
    # preview
    pytest.param(["preview", "{site}/good.yaml", "-n", "0"], USAGE, ["-n", "0"], id="preview-zero-rows"),
    pytest.param(
        ["preview", "{site}/good.yaml", "-n", "many"], USAGE, ["-n", "'many'"], id="preview-rows-text"
    ),
    pytest.param(
        ["preview", "{site}/absent.yaml"], 1, ["absent.yaml", "does not exist"], id="preview-missing-config"
    ),
    pytest.param(["preview", "{site}"], USAGE, ["CONFIG", "is a directory"], id="preview-a-directory"),
    pytest.param(
        ["preview", "{site}/good.yaml", "--html", "{site}"],
        USAGE,
        ["--html", "is a directory"],
        id="preview-html-a-directory",
    ),
    # bench
    pytest.param(
        ["bench", "{site}/good.yaml", "--batches", "0"], USAGE, ["--batches", "0"], id="bench-zero-batches"
    ),
    pytest.param(
        ["bench", "{site}/good.yaml", "--batches", "-1"],
        USAGE,
        ["--batches", "-1"],
        id="bench-negative-batches",
    ),
    pytest.param(
        ["bench", "{site}/good.yaml", "--batches", "two"],
        USAGE,
        ["--batches", "'two'"],
        id="bench-batches-text",
    ),
    pytest.param(
        ["bench", "{site}/absent.yaml"], 1, ["absent.yaml", "does not exist"], id="bench-missing-config"
    ),
    # show
    pytest.param(["show"], USAGE, ["Missing argument", "NAME"], id="show-no-name"),
    pytest.param(["show", "multimodel"], 1, ["'multimodel'", "did you mean 'multimodal'"], id="show-typo"),
    pytest.param(["show", "nothing-like-it"], 1, ["'nothing-like-it'", "Installed"], id="show-unknown"),
    pytest.param(
        ["show", "multimodal", "--kind", "nope"], USAGE, ["--kind", "'nope'"], id="show-unknown-kind"
    ),
    pytest.param(
        ["show", "multimodal", "--kind", "packing-strategy"],
        1,
        ["packing_strategy", "'multimodal'"],
        id="show-wrong-kind",
    ),
    # schema
    pytest.param(
        ["schema", "extra"], USAGE, ["unexpected extra argument", "extra"], id="schema-extra-argument"
    ),
    pytest.param(
        ["schema", "-o", "{site}/absent-folder/schema.json"],
        1,
        ["absent-folder/schema.json"],
        id="schema-output-in-missing-folder",
    ),
    pytest.param(
        ["schema", "-o", "{site}"], USAGE, ["--output", "is a directory"], id="schema-output-a-directory"
    ),
    # list
    pytest.param(["list", "--kind", "nope"], USAGE, ["--kind", "'nope'"], id="list-unknown-kind"),
    pytest.param(["list", "extra"], USAGE, ["unexpected extra argument", "extra"], id="list-extra-argument"),
    # new-plugin
    pytest.param(
        ["new-plugin", "bad name", "-o", "{site}"], 1, ["'bad name'", "lowercase"], id="new-plugin-space"
    ),
    pytest.param(["new-plugin", "", "-o", "{site}"], 1, ["plugin name", "empty"], id="new-plugin-empty"),
    pytest.param(
        ["new-plugin", "x", "--kind", "nope"], USAGE, ["--kind", "'nope'"], id="new-plugin-unknown-kind"
    ),
    pytest.param(
        ["new-plugin", "x", "-o", "{site}/file.txt"],
        1,
        ["file.txt", "not a folder"],
        id="new-plugin-output-a-file",
    ),
    # demo
    pytest.param(
        ["demo", "--config", "{site}/absent.yaml"],
        USAGE,
        ["--config", "absent.yaml", "does not exist"],
        id="demo-missing-config",
    ),
    pytest.param(
        ["demo", "--cache-dir", "{site}/file.txt"],
        USAGE,
        ["--cache-dir", "file.txt", "is a file"],
        id="demo-cache-a-file",
    ),
    pytest.param(["demo", "--steps", "3"], USAGE, ["--steps"], id="demo-unknown-option"),
    # convert
    pytest.param(["convert", "{site}/records.json", "{site}/out"], USAGE, ["--from"], id="convert-no-format"),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "nope"],
        1,
        ["'nope'", "llava-json"],
        id="convert-unknown-format",
    ),
    pytest.param(
        ["convert", "{site}/absent.json", "{site}/out", "--from", "llava-json"],
        USAGE,
        ["SOURCE", "absent.json"],
        id="convert-missing-source",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/file.txt", "--from", "llava-json"],
        USAGE,
        ["OUTPUT", "file.txt"],
        id="convert-output-a-file",
    ),
    pytest.param(
        [
            "convert",
            "{site}/records.json",
            "{site}/out",
            "--from",
            "llava-json",
            "--split-ratio",
            "train=abc",
        ],
        1,
        ["split_ratio", "'abc'"],
        id="convert-split-ratio-text",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--split-ratio", "0.5,0.2"],
        1,
        ["split_ratio", "0.7"],
        id="convert-split-ratio-sum",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--shard-size", "12XB"],
        1,
        ["shard_size", "'12XB'"],
        id="convert-shard-size",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--workers", "-3"],
        1,
        ["workers"],
        id="convert-negative-workers",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--max-rejected", "200%"],
        1,
        ["max_rejected", "'200%'"],
        id="convert-max-rejected",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--max-image-size", "lots"],
        1,
        ["max_image_size", "'lots'"],
        id="convert-max-image-size",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--reencode", "gif"],
        USAGE,
        ["--reencode", "'gif'"],
        id="convert-reencode-gif",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "-o", "nope=1"],
        1,
        ["options.nope", "image_folder"],
        id="convert-unknown-option",
    ),
    pytest.param(
        ["convert", "{site}/records.json", "{site}/out", "--from", "llava-json", "--image-token", ""],
        1,
        ["image_token"],
        id="convert-empty-image-token",
    ),
    pytest.param(
        [
            "convert",
            "{site}/records.json",
            "{site}/out",
            "--from",
            "llava-json",
            "--allow-outside",
            "{site}/absent",
        ],
        USAGE,
        ["--allow-outside", "absent"],
        id="convert-allow-missing-folder",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("args", "code", "named"), CASES)
def test_a_bad_argument_is_named(site, vqa_dataset, args, code, named):
    filled = [arg.format(site=site) for arg in args]
    refused(filled, *named, watch=(site, vqa_dataset.path), exit_codes=(code,), one_paragraph=code != USAGE)
    assert not (site / "out").exists()
