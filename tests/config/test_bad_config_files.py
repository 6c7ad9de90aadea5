"""Bad config files, one table: types, bounds, unknown keys, nesting, encodings, byte-order
marks, tabs, binary junk, huge files, anchors, duplicate keys, JSON against YAML.

Every row writes one file beside a good config and runs ``energon-plugins validate --quick``
on it (the config alone: no torch, so each row takes milliseconds). The refusal exits 1, names
the key or the file (and the line where one is known), shows no traceback and changes nothing
in the site or the dataset. The rows of ``test_bad_inputs.py`` that cover config files through
the full ``validate`` are not repeated here.
"""

import codecs
import json
import os
from pathlib import Path

import pytest

from tests.config._bad_site import changed, make_site, refused, run, write_case


@pytest.fixture(scope="module")
def site(tmp_path_factory, vqa_dataset, tokenizer) -> Path:
    return make_site(tmp_path_factory.mktemp("bad-config-files"), vqa_dataset.path, tokenizer)


def nested(depth: int, leaf: object = 1) -> object:
    """``{"a": {"a": ... leaf}}`` ``depth`` mappings deep (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


# -- mappings: one key changed (dotted; ... deletes it) ----------------------------------------

CHANGED = [
    # types
    pytest.param({"seq_length": "x"}, ["seq_length", "integer"], id="seq-length-text"),
    pytest.param({"seq_length": 2.5}, ["seq_length", "integer"], id="seq-length-float"),
    pytest.param({"seq_length": [4]}, ["seq_length", "integer"], id="seq-length-list"),
    pytest.param({"micro_batch_size": None}, ["micro_batch_size"], id="micro-batch-null"),
    pytest.param({"pin_memory": 1}, ["pin_memory", "true or false"], id="pin-memory-one"),
    pytest.param({"tokenizer": "tokenizer"}, ["tokenizer", "mapping"], id="tokenizer-not-a-mapping"),
    pytest.param({"task_encoder": ["multimodal"]}, ["task_encoder", "mapping"], id="encoder-a-list"),
    pytest.param({"energon": [1, 2]}, ["energon"], id="energon-a-list"),
    pytest.param({"path": 42}, ["path", "string"], id="path-a-number"),
    pytest.param({"path": ""}, ["path", "must not be empty"], id="path-empty"),
    pytest.param({"sample_config": "<image>"}, ["sample_config"], id="sample-config-text"),
    # bounds
    pytest.param({"seq_length": 10**26}, ["seq_length", "16777216"], id="seq-length-1e26"),
    pytest.param({"seq_length": 0}, ["seq_length"], id="seq-length-zero"),
    pytest.param(
        {"decoder_seq_length": 2**25}, ["decoder_seq_length", "16777216"], id="decoder-seq-too-long"
    ),
    pytest.param(
        {"shuffle_buffer_size": 10**18},
        ["shuffle_buffer_size", "1048576", "before the first batch"],
        id="shuffle-buffer-1e18",
    ),
    pytest.param({"shuffle_buffer_size": -1}, ["shuffle_buffer_size"], id="shuffle-buffer-negative"),
    pytest.param({"num_workers": 100_000}, ["num_workers", "1024"], id="workers-100000"),
    pytest.param({"micro_batch_size": 2**30}, ["micro_batch_size"], id="micro-batch-huge"),
    pytest.param(
        {"packing": {"name": "first-fit-decreasing"}, "packing_buffer_size": 10**9},
        ["packing_buffer_size", "65536"],
        id="packing-buffer-huge",
    ),
    pytest.param(
        {"checkpoint_every_sec": float("inf")}, ["checkpoint_every_sec", "finite"], id="checkpoint-sec-inf"
    ),
    pytest.param({"checkpoint_every_sec": float("nan")}, ["checkpoint_every_sec"], id="checkpoint-sec-nan"),
    pytest.param({"n_checkpoints": 2**40}, ["n_checkpoints"], id="n-checkpoints-huge"),
    pytest.param({"val_batches_per_evaluation": 0}, ["val_batches_per_evaluation"], id="val-batches-zero"),
    pytest.param(
        {"energon": {"virtual_epoch_length": -7}},
        ["energon.virtual_epoch_length", "-7"],
        id="virtual-epoch-negative",
    ),
    pytest.param(
        {"energon": {"shuffle_over_epochs_multiplier": 0}},
        ["energon.shuffle_over_epochs_multiplier", "-1"],
        id="shuffle-over-epochs-zero",
    ),
    pytest.param(
        {"energon": {"repeat": "no"}}, ["energon.repeat", "true or false"], id="energon-repeat-text"
    ),
    pytest.param(
        {"energon": {"parallel_shard_iters": 0}}, ["energon.parallel_shard_iters"], id="shard-iters-zero"
    ),
    pytest.param(
        {"energon": {"subset": {"range": [0, 0.5]}}}, ["energon.subset", "metadataset"], id="energon-subset"
    ),
    pytest.param(
        {"energon": {"part_filter": 7}}, ["energon.part_filter", "part names"], id="part-filter-number"
    ),
    # unknown keys
    pytest.param({"seq_len": 4}, ["seq_len", "did you mean 'seq_length'"], id="unknown-top-level"),
    pytest.param({"tokenizer.pth": "x"}, ["tokenizer.pth", "did you mean 'path'"], id="unknown-in-tokenizer"),
    pytest.param(
        {"task_encoder.nme": "llava"}, ["task_encoder.nme", "did you mean 'name'"], id="unknown-in-selection"
    ),
    pytest.param({"energon": {"bogus": 1}}, ["energon.bogus", "unknown key"], id="unknown-energon-argument"),
    pytest.param(
        {"energon": {"batch_size": 4}},
        ["energon.batch_size", "micro_batch_size"],
        id="reserved-energon-argument",
    ),
    pytest.param(
        {"energon": {"handler": "x"}}, ["energon.handler", "not accepted"], id="refused-energon-argument"
    ),
    # required keys
    pytest.param({"path": ...}, ["path", "required"], id="no-path"),
    pytest.param({"tokenizer": ...}, ["tokenizer", "required"], id="no-tokenizer"),
    pytest.param({"tokenizer": {}}, ["tokenizer.path", "required"], id="tokenizer-without-path"),
    # nesting and size inside the values
    pytest.param({"energon": {"subflavors": nested(70)}}, ["nests", "64 levels"], id="energon-nested-70"),
    pytest.param({"task_encoder.options": nested(70)}, ["nests", "64 levels"], id="options-nested-70"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("changes", "named"), CHANGED)
def test_a_bad_value_in_a_yaml_file_is_named(site, vqa_dataset, changes, named):
    case = write_case(site, changed(site, changes))
    refused(["validate", "--quick", case], *named, watch=(site, vqa_dataset.path))


@pytest.mark.bad_input
@pytest.mark.parametrize(("changes", "named"), CHANGED[:12])
def test_the_same_value_in_a_json_file_is_named_alike(site, vqa_dataset, changes, named):
    case = write_case(site, json.dumps(changed(site, changes)), name="case.json")
    refused(["validate", "--quick", case], *named, watch=(site, vqa_dataset.path))


# -- text and bytes --------------------------------------------------------------------------------

GOOD_TEXT = "path: {path}\ntokenizer: {{path: ../tokenizer}}\nseq_length: 320\n"


def _text(site: Path, vqa_dataset, body: str) -> str:
    return GOOD_TEXT.format(path=vqa_dataset.path) + body


ANCHOR_BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10) if prev else ', '.join(['x'] * 10)}]\n"
    for prev, name in zip([None, "a", "b", "c", "d"], ["a", "b", "c", "d", "e"])
)

TEXTS = [
    # duplicate keys
    pytest.param(
        "seq_length: 4\n",
        "case.yaml",
        ["case.yaml", "'seq_length' is given twice", "line 3 and line 4"],
        id="yaml-duplicate-key",
    ),
    pytest.param(
        "task_encoder:\n  name: multimodal\n  name: llava\n",
        "case.yaml",
        ["case.yaml", "'name' is given twice", "line 5 and line 6"],
        id="yaml-duplicate-nested-key",
    ),
    pytest.param(
        "energon: {repeat: true, repeat: false}\n",
        "case.yaml",
        ["'repeat' is given twice on line 4"],
        id="yaml-duplicate-in-flow",
    ),
    pytest.param(
        "'seq_length': 8\n", "case.yaml", ["'seq_length' is given twice"], id="yaml-duplicate-quoted"
    ),
    # YAML that is not a config
    pytest.param(
        "\tseq_length: 4\n", "case.yaml", ["case.yaml", "not valid YAML", "line 4"], id="tab-indentation"
    ),
    pytest.param("energon: *nowhere\n", "case.yaml", ["case.yaml", "nowhere"], id="alias-to-no-anchor"),
    pytest.param("energon:\n  <<: 5\n", "case.yaml", ["case.yaml", "not valid YAML"], id="merge-of-a-scalar"),
    pytest.param(
        "x: !!python/object/apply:os.system ['true']\n",
        "case.yaml",
        ["case.yaml", "python/object"],
        id="python-tag",
    ),
    pytest.param("x: !custom 1\n", "case.yaml", ["case.yaml", "!custom"], id="unknown-tag"),
    pytest.param(
        "extra:\n" + "".join(f"  - {line}" for line in ANCHOR_BOMB.splitlines(True)),
        "case.yaml",
        ["case.yaml", "anchors and aliases"],
        id="anchors-in-a-list",
    ),
    pytest.param(
        "x: " + "[" * 70 + "]" * 70 + "\n", "case.yaml", ["case.yaml", "64 levels"], id="yaml-nested-70"
    ),
    pytest.param("1: x\n", "case.yaml", ["case.yaml", "keys must be strings"], id="integer-key"),
    pytest.param("---\na: 1\n---\nb: 2\n", "case.yaml", ["case.yaml", "not valid YAML"], id="two-documents"),
    # values YAML builds but no config holds
    pytest.param(
        "sample_config: {image_token: 2020-02-30}\n",
        "case.yaml",
        ["case.yaml", "line 4", "2020-02-30"],
        id="impossible-date",
    ),
    pytest.param(
        "energon: {subflavors: {when: 2020-02-20}}\n",
        "case.yaml",
        ["case.yaml", "line 4", "date", "quote it"],
        id="a-date",
    ),
    pytest.param(
        "energon: {subflavors: {raw: !!binary aGVsbG8=}}\n",
        "case.yaml",
        ["case.yaml", "binary"],
        id="binary-value",
    ),
    pytest.param("energon: {subflavors: !!set {a, b}}\n", "case.yaml", ["case.yaml", "set"], id="set-value"),
    pytest.param("num_workers: 0x_\n", "case.yaml", ["case.yaml", "line 4", "0x_"], id="hex-without-digits"),
    pytest.param("pin_memory: !!bool maybe\n", "case.yaml", ["case.yaml", "maybe"], id="bool-tag-on-text"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("body", "name", "named"), TEXTS)
def test_bad_yaml_text_is_named_with_its_line(site, vqa_dataset, body, name, named):
    case = write_case(site, _text(site, vqa_dataset, body), name=name)
    refused(["validate", "--quick", case], *named, watch=(site, vqa_dataset.path))


def _json(site: Path, vqa_dataset) -> str:
    return json.dumps({"path": str(vqa_dataset.path), "tokenizer": {"path": "../tokenizer"}})


JSON_TEXTS = [
    pytest.param(
        lambda good: good[:-1] + ', "seq_length": 4, "seq_length": 8}',
        ["case.json", "'seq_length' is given twice", "JSON"],
        id="json-duplicate-key",
    ),
    pytest.param(
        lambda good: good[:-1] + ', "task_encoder": {"name": "llava", "name": "multimodal"}}',
        ["case.json", "'name' is given twice"],
        id="json-duplicate-nested-key",
    ),
    pytest.param(
        lambda good: "// a comment\n" + good, ["case.json", "not valid JSON", "line 1"], id="json-comment"
    ),
    pytest.param(lambda good: good[:-1] + ",}", ["case.json", "not valid JSON"], id="json-trailing-comma"),
    pytest.param(
        lambda good: good.replace('"', "'"), ["case.json", "not valid JSON"], id="json-single-quotes"
    ),
    pytest.param(lambda good: good[:-1] + ', "seq_length": NaN}', ["seq_length", "integer"], id="json-nan"),
    pytest.param(
        lambda good: good[:-1] + ', "seq_length": 1e26}', ["seq_length", "integer"], id="json-exponent"
    ),
    pytest.param(lambda good: "[" + good + "]", ["case.json", "mapping"], id="json-array"),
    pytest.param(lambda good: '"path"', ["case.json", "mapping"], id="json-string"),
    pytest.param(lambda good: "null", ["case.json", "empty"], id="json-null"),
    pytest.param(lambda good: "", ["case.json", "not valid JSON"], id="json-empty-file"),
    pytest.param(
        lambda good: "path: x\ntokenizer: {path: y}\n",
        ["case.json", "not valid JSON"],
        id="yaml-in-a-json-file",
    ),
    pytest.param(
        lambda good: good[:-1] + ', "energon": {"subflavors": ' + json.dumps(nested(900)) + "}}",
        ["case.json", "nests mappings or lists deeper than 64 levels"],
        id="json-nested-900",
    ),
    pytest.param(lambda good: "[" * 100_000 + "]" * 100_000, ["case.json", "nests"], id="json-nested-100000"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("make", "named"), JSON_TEXTS)
def test_bad_json_text_is_named(site, vqa_dataset, make, named):
    case = write_case(site, make(_json(site, vqa_dataset)), name="case.json")
    refused(["validate", "--quick", case], *named, watch=(site, vqa_dataset.path))


BYTES = [
    pytest.param(
        codecs.BOM_UTF16_LE + "seq_length: 4\n".encode("utf-16-le"),
        ["case.yaml", "UTF-16", "UTF-8"],
        id="utf-16",
    ),
    pytest.param(
        codecs.BOM_UTF32_LE + "seq_length: 4\n".encode("utf-32-le"), ["case.yaml", "UTF-32"], id="utf-32"
    ),
    pytest.param(
        "image_token: café\n".encode("latin-1"), ["case.yaml", "not UTF-8", "0xe9", "line 1"], id="latin-1"
    ),
    pytest.param(b"seq_length: 4\x00\n", ["case.yaml", "not valid YAML", "#x0000"], id="nul-byte"),
    pytest.param(b"seq_length: \x07\n", ["case.yaml", "not valid YAML"], id="control-character"),
    pytest.param(b"\x89PNG\r\n\x1a\n" + bytes(range(256)), ["case.yaml"], id="a-png-named-yaml"),
    pytest.param(b"\xff" * 64, ["case.yaml", "not UTF-8"], id="binary-junk"),
    pytest.param(
        b"# " + b"x" * (5 * 1024 * 1024) + b"\n", ["case.yaml", "at most 4 MiB"], id="five-mebibytes"
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("raw", "named"), BYTES)
def test_bytes_that_are_no_config_text_are_named(site, vqa_dataset, raw, named):
    case = write_case(site, raw)
    refused(["validate", "--quick", case], *named, watch=(site, vqa_dataset.path))


# -- files that are not there or not files --------------------------------------------------------


def _missing(site: Path) -> Path:
    return site / "cases" / "absent.yaml"


def _dangling(site: Path) -> Path:
    link = site / "cases" / "dangling.yaml"
    link.parent.mkdir(exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(site / "cases" / "gone.yaml")
    return link


def _fifo(site: Path) -> Path:
    fifo = site / "cases" / "pipe.yaml"
    fifo.parent.mkdir(exist_ok=True)
    if not fifo.exists():
        os.mkfifo(fifo)
    return fifo


FILES = [
    pytest.param(_missing, ["absent.yaml", "does not exist"], id="missing"),
    pytest.param(_dangling, ["dangling.yaml", "does not exist"], id="dangling-symlink"),
    pytest.param(_fifo, ["pipe.yaml", "not a regular file"], id="a-fifo"),
    pytest.param(lambda site: Path("/dev/zero"), ["/dev/zero", "not a regular file"], id="a-device"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("where", "named"), FILES)
def test_a_config_path_that_is_no_file_is_named(site, vqa_dataset, where, named):
    refused(["validate", "--quick", where(site)], *named, watch=(site, vqa_dataset.path))


# -- what is not refused -------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_utf8_byte_order_mark_is_read(site, vqa_dataset, suffix):
    data = {"path": str(vqa_dataset.path), "tokenizer": {"path": "../tokenizer"}}
    text = json.dumps(data) if suffix == ".json" else _text(site, vqa_dataset, "")
    case = write_case(site, codecs.BOM_UTF8 + text.encode(), name=f"bom{suffix}")
    result = run(["validate", "--quick", case])
    assert result.exit_code == 0, result.output
    assert ": valid (" in result.output


def test_a_merge_key_may_be_overridden(site, vqa_dataset):
    """``<<: *base`` then one of base's keys is YAML's override, not a duplicate key."""
    body = "task_encoder: &base {name: multimodal}\nvalidation_task_encoder: {<<: *base, name: llava}\n"
    result = run(["validate", "--quick", write_case(site, _text(site, vqa_dataset, body))])
    assert result.exit_code == 0, result.output
