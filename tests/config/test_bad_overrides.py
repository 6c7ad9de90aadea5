"""Bad overrides, one table: ``--set KEY=VALUE`` of ``validate``, ``preview`` and ``bench``,
``-o KEY=VALUE`` of ``convert``, and the overrides and mappings handed to ``load_config`` and
``EnergonMultiModalDataModule.from_config``.

A command-line row exits 1 naming the flag, the key and the value (or the config key the
override broke), with no traceback, before anything is imported or written: each runs in
milliseconds and changes nothing in the site, the dataset or convert's output folder. A Python
row raises the project's ``ConfigError`` with a message that names the key and shows no
traceback.
"""

import json
from pathlib import Path

import pytest

from energon_plugins.errors import ConfigError
from tests._refusals import assert_refusal, unchanged
from tests.config._bad_site import make_site, refused


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer) -> Path:
    root = make_site(tmp_path_factory.mktemp("bad-overrides"), vqa_dataset.path, tokenizer)
    (root / "convert").mkdir()
    (root / "convert" / "records.json").write_text("[]", encoding="utf-8")
    return root


def nested_flow(depth: int) -> str:
    """``[[[...]]]`` ``depth`` lists deep, as flow YAML."""
    return "[" * depth + "]" * depth


SETS = [
    # (the --set items, what the message names)
    pytest.param(["seq_length"], ["--set", "KEY=VALUE", "'seq_length'"], id="no-equals"),
    pytest.param(["=4"], ["--set", "KEY=VALUE", "'=4'"], id="no-key"),
    pytest.param([" =4"], ["--set", "KEY=VALUE"], id="blank-key"),
    pytest.param([".seq_length=4"], ["'.seq_length'", "empty part"], id="leading-dot"),
    pytest.param(["task_encoder..name=x"], ["'task_encoder..name'", "empty part"], id="double-dot"),
    pytest.param(
        ["seq_length=2020-02-30"],
        ["--set seq_length", "'2020-02-30'", "day is out of range"],
        id="impossible-date",
    ),
    pytest.param(["seq_length=2020-02-20"], ["--set seq_length", "'2020-02-20'", "date"], id="a-date"),
    pytest.param(["x=0x_"], ["--set x", "'0x_'", "cannot be read"], id="hex-without-digits"),
    pytest.param(["pin_memory=!!bool maybe"], ["--set pin_memory", "maybe"], id="bool-tag-on-text"),
    pytest.param(["seq_length=!!int x"], ["--set seq_length", "!!int x"], id="int-tag-on-text"),
    pytest.param(["seq_length=[unclosed"], ["--set seq_length", "not valid YAML"], id="unclosed-flow"),
    pytest.param(
        ["energon={repeat: true, repeat: false}"],
        ["--set energon", "'repeat' is given twice"],
        id="duplicate-key",
    ),
    pytest.param(["energon=" + nested_flow(70)], ["--set energon", "64 levels"], id="nested-70"),
    pytest.param(["energon.subflavors=!!binary aGk="], ["--set energon.subflavors", "binary"], id="binary"),
    pytest.param(
        ["x=!!python/object/apply:os.system [true]"], ["--set x", "not valid YAML"], id="python-tag"
    ),
    pytest.param(["seq_lenght=4"], ["seq_lenght", "did you mean 'seq_length'"], id="unknown-key"),
    pytest.param(["seq_length=1e26"], ["seq_length", "integer", "'1e26'"], id="exponent-is-text"),
    pytest.param(
        ["seq_length=100000000000000000000000000"], ["seq_length", "16777216"], id="seq-length-1e26"
    ),
    pytest.param(["seq_length="], ["seq_length", "integer"], id="empty-value"),
    pytest.param(
        ["shuffle_buffer_size=1000000000000000000"],
        ["shuffle_buffer_size", "1048576"],
        id="shuffle-buffer-1e18",
    ),
    pytest.param(
        ["energon.virtual_epoch_length=-7"],
        ["energon.virtual_epoch_length", "-7"],
        id="virtual-epoch-negative",
    ),
    pytest.param(
        ["task_encoder.options.truncaton=drop"],
        ["task_encoder.options.truncaton", "truncation"],
        id="option-typo",
    ),
    pytest.param(["task_encoder=multimodal"], ["task_encoder", "mapping"], id="selection-as-text"),
    pytest.param(
        ["tokenizer.path=no-such-tokenizer"], ["tokenizer.path", "no-such-tokenizer"], id="tokenizer-missing"
    ),
    pytest.param(["path=/no/such/dataset"], ["path", "/no/such/dataset"], id="dataset-missing"),
    pytest.param(
        ["seq_length=4", "seq_length.x=1"],
        ["'seq_length'", "'seq_length.x'", "conflict"],
        id="value-and-sub-key",
    ),
    pytest.param(["packing.name=first-fit-decreasing"], ["packing_buffer_size"], id="packing-without-buffer"),
    pytest.param(
        ["packing=null", "packing_buffer_size=8"],
        ["packing", "packing_buffer_size is 8"],
        id="buffer-without-packing",
    ),
    pytest.param(["val_batches_per_evaluation=0"], ["val_batches_per_evaluation"], id="val-batches-zero"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("sets", "named"), SETS)
def test_a_bad_set_is_named_by_validate(site, vqa_dataset, sets, named):
    args = ["validate", "--quick", site / "good.yaml"]
    for item in sets:
        args += ["--set", item]
    refused(args, *named, watch=(site, vqa_dataset.path))


VERB_SETS = [
    pytest.param("preview", "seq_length=2020-02-30", ["--set seq_length", "2020-02-30"], id="preview-date"),
    pytest.param("preview", "x=0x_", ["--set x", "0x_"], id="preview-hex"),
    pytest.param(
        "preview", "shuffle_buffer_size=1000000000000000000", ["shuffle_buffer_size"], id="preview-buffer"
    ),
    pytest.param("bench", "seq_length=2020-02-30", ["--set seq_length", "2020-02-30"], id="bench-date"),
    pytest.param(
        "bench", "energon.virtual_epoch_length=-7", ["energon.virtual_epoch_length"], id="bench-epoch"
    ),
    pytest.param("bench", "seq_length", ["--set", "KEY=VALUE"], id="bench-no-equals"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("verb", "item", "named"), VERB_SETS)
def test_a_bad_set_is_named_by_preview_and_bench(site, vqa_dataset, verb, item, named):
    refused([verb, site / "good.yaml", "--set", item], *named, watch=(site, vqa_dataset.path))


CONVERT_OPTIONS = [
    pytest.param(
        "image_folder=2020-02-30", ["-o/--option image_folder", "'2020-02-30'"], id="impossible-date"
    ),
    pytest.param("image_folder=2020-02-20", ["-o/--option image_folder", "date", "quote it"], id="a-date"),
    pytest.param("max_depth=0x_", ["-o/--option max_depth", "'0x_'"], id="hex-without-digits"),
    pytest.param("image_folder", ["-o/--option", "KEY=VALUE"], id="no-equals"),
    pytest.param(
        "image_folder=[unclosed", ["-o/--option image_folder", "not valid YAML"], id="unclosed-flow"
    ),
    pytest.param("max_depth=" + nested_flow(70), ["-o/--option max_depth", "64 levels"], id="nested-70"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("item", "named"), CONVERT_OPTIONS)
def test_a_bad_convert_option_is_named(site, item, named):
    source, output = site / "convert" / "records.json", site / "convert" / "out"
    refused(["convert", source, output, "--from", "llava-json", "-o", item], *named, watch=(site,))
    assert not output.exists()


# -- through Python ------------------------------------------------------------------------------


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def looped() -> dict:
    loop: dict = {"a": 1}
    loop["self"] = loop
    return loop


def shared_wide() -> dict:
    """A mapping of 20 references to one list of 10,000 values: 200,000 once copied."""
    row = list(range(10_000))
    return {f"k{i}": row for i in range(20)}


PYTHON = [
    # (source: "file" or a mapping factory, overrides factory, what the message names)
    pytest.param("file", lambda: {"a..b": 1}, ["'a..b'", "empty part"], id="empty-part"),
    pytest.param("file", lambda: {"": 1}, ["''", "empty part"], id="empty-key"),
    pytest.param("file", lambda: {"seq_length": 4, "seq_length.x": 1}, ["conflict"], id="value-and-sub-key"),
    pytest.param(
        "file",
        lambda: {"energon": {"subflavors": nested(900)}},
        ["<overrides>", "64 levels"],
        id="override-nested-900",
    ),
    pytest.param(
        "file",
        lambda: {"energon.subflavors": looped()},
        ["<overrides>", "64 levels"],
        id="override-contains-itself",
    ),
    pytest.param(
        "file",
        lambda: {"energon.subflavors": shared_wide()},
        ["<overrides>", "100000 values"],
        id="override-shared-references",
    ),
    pytest.param("mapping", lambda: {}, ["<mapping>", "64 levels"], id="mapping-nested-900"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("source", "overrides", "named"), PYTHON)
def test_a_bad_override_is_a_config_error_of_load_config(site, vqa_dataset, source, overrides, named):
    from energon_plugins.config import load_config

    config = site / "good.yaml"
    if source == "mapping":
        data = json.loads(json.dumps({"path": str(vqa_dataset.path), "tokenizer": {"path": "x"}}))
        data["energon"] = {"subflavors": nested(900)}
        config = data
    with unchanged(site, vqa_dataset.path), pytest.raises(ConfigError) as caught:
        load_config(config, overrides())
    assert_refusal(str(caught.value), *named)


FROM_CONFIG = [
    pytest.param(
        lambda: {"energon": {"subflavors": nested(900)}}, ["<overrides>", "64 levels"], id="nested-900"
    ),
    pytest.param(
        lambda: {"shuffle_buffer_size": 10**18}, ["shuffle_buffer_size", "1048576"], id="shuffle-buffer-1e18"
    ),
    pytest.param(lambda: {"seq_length": 10**26}, ["seq_length", "16777216"], id="seq-length-1e26"),
    pytest.param(
        lambda: {"energon.virtual_epoch_length": -7},
        ["energon.virtual_epoch_length"],
        id="virtual-epoch-negative",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("overrides", "named"), FROM_CONFIG)
def test_from_config_refuses_before_building_anything(site, vqa_dataset, overrides, named):
    from energon_plugins import EnergonMultiModalDataModule

    with unchanged(site, vqa_dataset.path), pytest.raises(ConfigError) as caught:
        EnergonMultiModalDataModule.from_config(site / "good.yaml", **overrides())
    assert_refusal(str(caught.value), *named)
