"""The datamodule config: loading, validation with dotted paths, overrides and the JSON Schema.

Configs point at a real Energon dataset (webdataset shards + the .nv-meta index written by
Energon's own prepare API) and at the demo metadataset.
"""

import json
import pathlib
import textwrap

import jsonschema
import pytest

from energon_plugins import get_registry
from energon_plugins.config import (
    ConfigValidationError,
    DataModuleConfig,
    apply_overrides,
    check_config,
    load_config,
    validate_config,
)
from energon_plugins.config.schema import config_json_schema
from energon_plugins.errors import ConfigError


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    """A directory with a prepared dataset ``ds/``, the demo metadataset and a tokenizer dir."""
    from energon_plugins.synthetic import write_dataset, write_demo_datasets

    root = tmp_path_factory.mktemp("config")
    write_dataset(
        root / "ds",
        kind="vqa",
        num_samples=20,
        samples_per_shard=10,
        split_ratio=(("train", 0.5), ("val", 0.5)),
    )
    write_demo_datasets(root / "demo", num_samples=20)
    (root / "tok").mkdir()
    (root / "plain-dir").mkdir()
    return root


def write(root: pathlib.Path, text: str, name: str = "config.yaml") -> pathlib.Path:
    path = root / name
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
path: ds
tokenizer: {path: tok}
"""


def test_minimal_config_gets_the_constructor_defaults(workspace):
    config = load_config(write(workspace, GOOD))
    assert config.path == str((workspace / "ds").resolve())
    assert config.tokenizer.path == str((workspace / "tok").resolve())
    assert (config.seq_length, config.micro_batch_size, config.global_batch_size) == (2048, 1, None)
    assert (config.num_workers, config.num_val_workers, config.pin_memory) == (1, None, True)
    assert config.shuffle_buffer_size == 100 and config.packing_buffer_size is None
    assert config.task_encoder.name == "energon-plugins:multimodal"
    assert config.image_processor.name == "energon-plugins:hf"
    assert config.packing is None and config.energon == {}


def test_metadataset_yaml_and_json_files_are_accepted(workspace):
    config = load_config(write(workspace, "path: demo/demo.yaml\ntokenizer: {path: tok}\n"))
    assert config.path.endswith("demo.yaml")
    data = {
        "path": "ds",
        "tokenizer": {"path": "tok"},
        "seq_length": 64,
        "packing": {"name": "ffd", "options": {"sort": False}},
        "packing_buffer_size": 8,
    }
    config = load_config(write(workspace, json.dumps(data), "config.json"))
    assert config.seq_length == 64 and config.packing.name == "ffd"
    assert config.packing.options == {"sort": False}


def test_relative_paths_resolve_against_the_config_file_not_the_cwd(workspace, tmp_path, monkeypatch):
    sub = workspace / "nested"
    sub.mkdir(exist_ok=True)
    path = write(sub, "path: ../ds\ntokenizer: {path: ../tok}\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(path).path == str((workspace / "ds").resolve())
    # A mapping resolves against base_dir (or the cwd): from tmp_path, '../ds' is wrong.
    with pytest.raises(ConfigValidationError, match="path"):
        load_config({"path": "../ds", "tokenizer": {"path": "../tok"}})
    assert load_config({"path": "ds", "tokenizer": {"path": "tok"}}, base_dir=workspace).path


def test_every_error_is_reported_at_once(workspace):
    path = write(
        workspace,
        """\
        path: ds
        tokenizer: {path: tok}
        seq_lenght: 10
        micro_batch_size: 0
        task_encoder: {name: multimodal, options: {image_tokns: 3, truncation: sideways}}
        packing: {name: greedy-knapsack, options: {sortt: true}}
        """,
    )
    with pytest.raises(ConfigValidationError) as info:
        load_config(path)
    paths = [issue.path for issue in info.value.issues]
    for expected in (
        "seq_lenght",
        "micro_batch_size",
        "task_encoder.options.image_tokns",
        "task_encoder.options.truncation",
        "packing.options.sortt",
        "packing_buffer_size",
    ):
        assert expected in paths, (expected, paths)
    message = str(info.value)
    assert "did you mean 'seq_length'" in message
    assert "did you mean 'image_tokens'" in message
    assert str(path) in message


# (config text, file name, what the message must name)
BROKEN = [
    ("path: ds\ntokenizer: {path: tok}\nseq_lenght: 8\n", "top-typo", ["seq_lenght", "seq_length"]),
    (
        "path: ds\ntokenizer: {path: tok}\ntask_encoder: {options: {image_tokns: 4}}\n",
        "option-typo",
        ["task_encoder.options.image_tokns", "image_tokens"],
    ),
    ("path: ds\ntokenizer: {path: tok}\nseq_length: long\n", "wrong-type", ["seq_length", "long"]),
    ("path: ds\ntokenizer: {path: tok}\npin_memory: sometimes\n", "wrong-bool", ["pin_memory"]),
    (
        "path: ds\ntokenizer: {path: tok}\ntask_encoder: {name: multimodl}\n",
        "unknown-encoder",
        ["task_encoder.name", "multimodl", "did you mean 'multimodal'", "Installed:"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nimage_processor: {name: hugging}\n",
        "unknown-processor",
        ["image_processor.name", "hugging", "Installed:"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\npacking: {name: first-fit}\npacking_buffer_size: 4\n",
        "unknown-packing",
        ["packing.name", "first-fit"],
    ),
    ("path: ds\ntokenizer: {path: tok}\nmicro_batch_size: -2\n", "negative-mbs", ["micro_batch_size"]),
    ("path: ds\ntokenizer: {path: tok}\nseq_length: 0\n", "zero-seq", ["seq_length"]),
    ("path: ds\ntokenizer: {path: tok}\nnum_workers: -1\n", "negative-workers", ["num_workers"]),
    (
        "path: ds\ntokenizer: {path: tok}\npacking_buffer_size: -5\npacking: {name: none}\n",
        "negative-buffer",
        ["packing_buffer_size"],
    ),
    (
        "path: no-such-dataset\ntokenizer: {path: tok}\n",
        "missing-dataset",
        ["path", "no-such-dataset", "does not exist"],
    ),
    ("path: plain-dir\ntokenizer: {path: tok}\n", "not-energon", ["path", ".nv-meta"]),
    ("tokenizer: {path: tok}\n", "no-path", ["path", "required"]),
    ("path: ds\n", "no-tokenizer", ["tokenizer", "required"]),
    (
        "path: ds\ntokenizer: {path: ./no-tokenizer-here}\n",
        "missing-tokenizer",
        ["tokenizer.path", "no-tokenizer-here"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\npacking: {name: ffd}\n",
        "packing-no-buffer",
        ["packing_buffer_size", "packing"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\npacking: {name: ffd, options: {sortt: false}}\n"
        "packing_buffer_size: 4\n",
        "packing-option-typo",
        ["packing.options.sortt", "'sort'"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\npacking: {name: bfd, options: {overlong: maybe}}\n"
        "packing_buffer_size: 4\n",
        "packing-option-value",
        ["packing.options.overlong"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nimage_processor: {name: hf, options: {path: x, "
        "class_name: CLIPImageProcessor}}\n",
        "processor-option-rule",
        ["image_processor.options"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nsample_config: {image_tokn: '<img>'}\n",
        "sample-config-typo",
        ["sample_config.image_tokn", "image_token"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nsample_config: {conversation_template: "
        "{user_role: bot, assistant_role: bot}}\n",
        "sample-config-roles",
        ["sample_config", "differ"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nenergon: {batch_size: 4}\n",
        "energon-reserved",
        ["energon.batch_size", "micro_batch_size"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nenergon: {virtual_epoch_lenght: 4}\n",
        "energon-typo",
        ["energon.virtual_epoch_lenght", "did you mean 'virtual_epoch_length'"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nmicro_batch_size: 3\nglobal_batch_size: 8\n",
        "gbs-multiple",
        ["global_batch_size", "multiple"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\ntask_encoder: multimodal\n",
        "selection-not-mapping",
        ["task_encoder"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\ntask_encoder: {nmae: multimodal}\n",
        "selection-typo",
        ["task_encoder.nmae", "did you mean 'name'"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\ntask_encoder: {options: [1, 2]}\n",
        "options-not-mapping",
        ["task_encoder.options"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nvalidation_task_encoder: {options: {on_eror: raise}}\n",
        "val-option-typo",
        ["validation_task_encoder.options.on_eror", "on_error"],
    ),
    ("- path: ds\n- tokenizer: {path: tok}\n", "non-mapping", ["mapping", "list"]),
    ("path: ds\ntokenizer: {path: tok\n", "invalid-yaml", ["not valid YAML", "line"]),
    ("", "empty-file", ["empty"]),
    ("# only a comment\n", "comment-only", ["empty"]),
    # the rules the constructor shares (energon_plugins.config.settings / energon_arguments)
    (
        "path: ds\ntokenizer: {path: tok}\nenergon: {checkpoint_every_sec: 5}\n",
        "energon-loader-option",
        ["energon.checkpoint_every_sec", "top-level key 'checkpoint_every_sec'"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nenergon: {my_dataset_flag: 1}\n",
        "energon-unknown",
        ["energon.my_dataset_flag", "unknown key", "get_train_dataset"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nenergon: {handler: x}\n",
        "energon-refused",
        ["energon.handler", "on_error"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nenergon: {limit: 3}\n",
        "energon-limit",
        ["energon.limit", "val_batches_per_evaluation"],
    ),
    ("path: ds\ntokenizer: {path: tok}\nseq_length: true\n", "bool-seq", ["seq_length", "True"]),
    ("path: ds\ntokenizer: {path: tok}\nnum_workers: 2.0\n", "float-workers", ["num_workers"]),
    ("path: ds\ntokenizer: {path: tok}\npin_memory: 1\n", "int-bool", ["pin_memory"]),
    (
        "path: ds\ntokenizer: {path: tok}\npacking_buffer_size: 8\n",
        "buffer-no-packing",
        ["packing:", "no packing strategy"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nval_batches_per_evaluation: 0\n",
        "zero-eval",
        ["val_batches_per_evaluation"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\ncheckpoint_every_sec: -1\n",
        "negative-ckpt-sec",
        ["checkpoint_every_sec", "greater than or equal to 0"],
    ),
    ("path: ds\ntokenizer: {path: tok}\nn_checkpoints: true\n", "bool-n-ckpt", ["n_checkpoints"]),
    (
        "path: ds\ntokenizer: {path: tok}\ncheckpoint_every_min_n_samples: '4'\n",
        "str-min-n",
        ["checkpoint_every_min_n_samples", "integer"],
    ),
    (
        "path: ds\ntokenizer: {path: tok}\nsequence_parallel: 'yes'\n",
        "str-sp",
        ["sequence_parallel", "true or false"],
    ),
]


@pytest.mark.parametrize("text,name,culprits", BROKEN, ids=[b[1] for b in BROKEN])
def test_broken_config_is_rejected_naming_the_culprit(workspace, text, name, culprits):
    path = write(workspace, text, f"{name}.yaml")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    for culprit in culprits:
        assert culprit in message, f"{culprit!r} not in:\n{message}"


def test_broken_table_is_large_enough():
    assert len(BROKEN) >= 20


def test_invalid_json_names_line(workspace):
    path = write(workspace, '{"path": "ds", "tokenizer": {"path": "tok"},}', "bad.json")
    with pytest.raises(ConfigError, match=r"not valid JSON.*line 1"):
        load_config(path)


def test_missing_config_file_is_a_config_error(workspace):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(workspace / "nope.yaml")


def test_energon_arguments_are_those_energon_accepts(workspace):
    base = {"path": "ds", "tokenizer": {"path": "tok"}}
    config = validate_config(
        {**base, "energon": {"repeat": False, "subflavors": {"a": 1}}}, base_dir=workspace
    )
    assert config.energon == {"repeat": False, "subflavors": {"a": 1}}
    with pytest.raises(ConfigValidationError) as info:
        validate_config(
            {**base, "energon": {"my_dataset_flag": 1, "shuffle_over_epochs": 2}}, base_dir=workspace
        )
    assert [i.path for i in info.value.issues] == ["energon.my_dataset_flag", "energon.shuffle_over_epochs"]
    assert "shuffle_over_epochs_multiplier" in str(info.value)


def test_global_batch_size_defaults_from_the_micro_batch(workspace):
    """Unset, it is micro batch x DP at run time, so micro_batch_size > 1 validates alone."""
    config = validate_config(
        {"path": "ds", "tokenizer": {"path": "tok"}, "micro_batch_size": 4}, base_dir=workspace
    )
    assert config.global_batch_size is None


def test_remote_urls_are_left_to_energon(workspace):
    config = validate_config({"path": "msc://bucket/ds", "tokenizer": {"path": "tok"}}, base_dir=workspace)
    assert config.path == "msc://bucket/ds"


def test_validation_imports_no_heavy_module(workspace):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from energon_plugins.config import load_config\n"
        f"load_config({str(write(workspace, GOOD, 'light.yaml'))!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'torch', 'transformers', 'megatron'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# -- overrides ---------------------------------------------------------------------------------


def test_overrides_merge_mappings_expand_dots_and_replace_values():
    data = {
        "path": "p",
        "task_encoder": {"name": "llava", "options": {"a": 1, "b": 2}},
        "packing": {"name": "ffd"},
    }
    out = apply_overrides(
        data,
        {
            "task_encoder": {"options": {"b": 3}},
            "task_encoder.options.c": 4,
            "packing": None,
            "seq_length": 8,
        },
    )
    assert out["task_encoder"] == {"name": "llava", "options": {"a": 1, "b": 3, "c": 4}}
    assert out["packing"] is None and out["seq_length"] == 8
    assert data["task_encoder"]["options"] == {"a": 1, "b": 2}  # the input is not modified


def test_conflicting_or_malformed_overrides_are_errors():
    with pytest.raises(ConfigError, match="conflict"):
        apply_overrides({}, {"seq_length": 4, "seq_length.x": 1})
    with pytest.raises(ConfigError, match="empty part"):
        apply_overrides({}, {"task_encoder..name": "x"})
    from energon_plugins.config.overrides import parse_set_option

    assert parse_set_option("packing=null") == ("packing", None)
    assert parse_set_option("task_encoder.options={a: 1}") == ("task_encoder.options", {"a": 1})
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_set_option("seq_length")


def test_overrides_are_validated_like_file_values(workspace):
    path = write(workspace, GOOD, "ovr.yaml")
    assert load_config(path, {"seq_length": 128}).seq_length == 128
    with pytest.raises(ConfigValidationError, match="task_encoder.options.image_tokns"):
        load_config(path, {"task_encoder.options.image_tokns": 3})
    with pytest.raises(ConfigValidationError, match="seq_lenght"):
        load_config(path, {"seq_lenght": 3})


def test_validation_encoder_defaults_to_the_train_selection(workspace):
    config = load_config(write(workspace, GOOD + "task_encoder: {options: {image_tokens: 4}}\n", "val.yaml"))
    selection = config.resolved_validation_selection()
    assert selection.name == "energon-plugins:multimodal"
    assert selection.options == {"image_tokens": 4}
    config = load_config(
        workspace / "val.yaml", {"validation_task_encoder": {"options": {"truncation": "drop"}}}
    )
    assert config.resolved_validation_selection().options == {"truncation": "drop"}


def test_config_object_round_trips_through_load_config(workspace):
    config = load_config(write(workspace, GOOD, "rt.yaml"))
    again = load_config(config, {"seq_length": 16})
    assert isinstance(again, DataModuleConfig) and again.seq_length == 16
    assert again.path == config.path


# -- schema ------------------------------------------------------------------------------------


def test_schema_has_a_variant_per_installed_plugin():
    schema = config_json_schema()
    text = json.dumps(schema)
    registry = get_registry()
    for kind in ("task_encoder", "image_processor", "packing_strategy"):
        for name in registry.names(kind):
            assert f'"{name}"' in text, (kind, name)
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_validates_a_good_config_and_rejects_a_bad_option():
    validator = jsonschema.Draft202012Validator(config_json_schema())
    good = {
        "path": "ds",
        "tokenizer": {"path": "tok"},
        "seq_length": 64,
        "task_encoder": {"name": "multimodal", "options": {"image_tokens": 4}},
        "packing": {"name": "first-fit-decreasing", "options": {"sort": False}},
        "packing_buffer_size": 8,
        "validation_task_encoder": {"options": {"truncation": "drop"}},
    }
    assert list(validator.iter_errors(good)) == []
    assert (
        list(
            validator.iter_errors({"path": "ds", "tokenizer": {"path": "t"}, "task_encoder": {"options": {}}})
        )
        == []
    )
    bad_option = {**good, "packing": {"name": "greedy-knapsack", "options": {"sort": False}}}
    assert list(validator.iter_errors(bad_option))
    bad_name = {**good, "task_encoder": {"name": "multimodl"}}
    assert list(validator.iter_errors(bad_name))
    typo = {**good, "seq_lenght": 3}
    assert list(validator.iter_errors(typo))
    bad_value = {**good, "task_encoder": {"name": "multimodal", "options": {"image_tokens": 0}}}
    assert list(validator.iter_errors(bad_value))


def test_check_config_returns_issues_without_raising(workspace):
    config, issues = check_config(
        {"path": "ds", "tokenizer": {"path": "tok"}, "seq_length": -1}, base_dir=workspace
    )
    assert config is None and [i.path for i in issues] == ["seq_length"]
    config, issues = check_config([1, 2])
    assert config is None and issues[0].path == "<root>"


# -- plugins beyond the built-ins --------------------------------------------------------------


def _registry_with_duplicate_name():
    """The installed plugins plus two distributions that both register task encoder 'dup'."""
    from pydantic import BaseModel, ConfigDict

    from energon_plugins import load_registry
    from energon_plugins.host.registry import PluginSpec

    class DupOptions(BaseModel):
        model_config = ConfigDict(extra="forbid")
        width: int = 1

    registry = load_registry()
    for dist in ("dist-a", "dist-b"):
        registry.add(
            PluginSpec(
                name="dup",
                kind="task_encoder",
                factory="x:y",
                options=DupOptions,
                description=f"dup from {dist}",
                aliases=(),
                distribution=dist,
                version="1.0",
                module=f"{dist}.mod",
            )
        )
    return registry


def test_a_name_claimed_twice_is_reported_with_both_distributions(workspace):
    registry = _registry_with_duplicate_name()
    config, issues = check_config(
        {"path": "ds", "tokenizer": {"path": "tok"}, "task_encoder": {"name": "dup"}},
        base_dir=workspace,
        registry=registry,
    )
    assert config is None and issues[0].path == "task_encoder.name"
    assert "dist-a" in issues[0].message and "dist-b" in issues[0].message
    config, issues = check_config(
        {
            "path": "ds",
            "tokenizer": {"path": "tok"},
            "task_encoder": {"name": "dist-b:dup", "options": {"widht": 2}},
        },
        base_dir=workspace,
        registry=registry,
    )
    assert [i.path for i in issues] == ["task_encoder.options.widht"]
    assert "did you mean 'width'" in issues[0].message and "dist-b" in issues[0].message


def test_schema_offers_only_qualified_names_for_a_shared_name():
    schema = config_json_schema(_registry_with_duplicate_name())
    validator = jsonschema.Draft202012Validator(schema)
    base = {"path": "ds", "tokenizer": {"path": "tok"}}
    assert (
        list(validator.iter_errors({**base, "task_encoder": {"name": "dist-a:dup", "options": {"width": 3}}}))
        == []
    )
    assert list(validator.iter_errors({**base, "task_encoder": {"name": "dup"}}))
    assert list(
        validator.iter_errors({**base, "task_encoder": {"name": "dist-a:dup", "options": {"widht": 3}}})
    )


def test_a_dataset_without_a_train_split_is_rejected(workspace):
    import shutil

    only_val = workspace / "only-val"
    shutil.copytree(workspace / "ds", only_val, dirs_exist_ok=True)
    split = only_val / ".nv-meta" / "split.yaml"
    split.write_text(split.read_text().replace("train:", "training:"))
    with pytest.raises(ConfigValidationError, match=r"path: .*no 'train' split"):
        load_config(write(workspace, "path: only-val\ntokenizer: {path: tok}\n", "noval.yaml"))
