"""Properties of config loading and overrides, checked with hypothesis (issue 13).

- a config file and the datamodule's constructor accept and refuse the same settings, and a
  file gives the values it holds (``load_config`` on the file equals it on the mapping);
- overrides: ``--set KEY=VALUE`` reads back the value written; applying overrides together is
  order-free and idempotent; one by one equals together (no plugin switch); overriding a key
  with the value it already has changes nothing;
- a bad value of an integer field is refused with an error naming the field's dotted path;
- any YAML (or JSON) text either loads or raises ``ConfigError`` naming the file;
- ``energon-plugins validate --quick`` on any mapping, any text or any ``--set`` override exits 0
  ("valid") or 1 (errors listed), never with a traceback or another exit code.

Config validation only: nothing here builds a loader or reads a dataset (the constructor is
called with a missing dataset path, so it stops with ``DatasetError`` once its arguments pass).
The bugs these properties found are pinned by the tests at the end.
"""

import copy
import json
import math
import string
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from energon_plugins.config import (
    ConfigValidationError,
    DataModuleConfig,
    apply_overrides,
    load_config,
)
from energon_plugins.config.energon_arguments import ENERGON_DATASET_ARGUMENTS, energon_value_issues
from energon_plugins.config.overrides import parse_set_option
from energon_plugins.config.settings import Boolean, Integer, LoaderSettings, Number
from energon_plugins.encoding.packing.options import FirstFitDecreasingOptions
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.encoding.task_encoders.options import MultimodalOptions
from energon_plugins.errors import ConfigError, DatasetError


def prop(max_examples: int) -> settings:
    """Hypothesis settings of these tests: no deadline, no example database on disk."""
    return settings(
        max_examples=max_examples, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
    )


BASE: dict[str, Any] = {"path": "data.jsonl", "tokenizer": {"path": "tok"}}
"""The smallest valid config (relative to the workspace)."""

FIXED_BASE = {key: st.just(value).map(copy.deepcopy) for key, value in BASE.items()}

PACKED: dict[str, Any] = {
    **BASE,
    "packing": {"name": "first-fit-decreasing"},
    "packing_buffer_size": 8,
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with what ``load_config`` checks: a ``.jsonl`` dataset and a tokenizer folder."""
    root = tmp_path_factory.mktemp("config-properties")
    (root / "data.jsonl").write_text('{"text": "a"}\n', encoding="utf-8")
    (root / "tok").mkdir()
    return root


def write(workspace: Path, data: Any, name: str = "config.yaml") -> Path:
    """``data`` written to ``workspace/name`` (YAML text as is, else dumped as YAML)."""
    file = workspace / name
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
    file.write_text(text, encoding="utf-8")
    return file


def flow(value: Any) -> str:
    """``value`` as the YAML a user types after ``--set KEY=``."""
    return yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)


def dump(config: Any) -> dict[str, Any]:
    return config.model_dump(mode="json")


# -- the settings, read from the shared model ----------------------------------------------------

KIND_OF_VALIDATOR = {
    Integer.__metadata__[0].func: "int",
    Number.__metadata__[0].func: "number",
    Boolean.__metadata__[0].func: "bool",
}


class Setting(typing.NamedTuple):
    name: str
    kind: str  # "int", "number" or "bool"
    nullable: bool
    low: float | None  # the least valid value (ge), or just below it (gt)
    strict_low: bool
    high: float | None = None  # the largest valid value (le)


def _settings() -> list[Setting]:
    out = []
    for name, field in LoaderSettings.model_fields.items():
        metadata = list(field.metadata)
        for arg in typing.get_args(field.annotation):
            metadata += list(getattr(arg, "__metadata__", ()))
        kinds = {KIND_OF_VALIDATOR[m.func] for m in metadata if getattr(m, "func", None) in KIND_OF_VALIDATOR}
        assert len(kinds) == 1, f"{name}: expected one of Integer, Number, Boolean"
        low = next((m.ge for m in metadata if hasattr(m, "ge")), None)
        gt = next((m.gt for m in metadata if hasattr(m, "gt")), None)
        high = next((m.le for m in metadata if hasattr(m, "le")), None)
        nullable = type(None) in typing.get_args(field.annotation)
        bound = gt if gt is not None else low
        out.append(Setting(name, kinds.pop(), nullable, bound, gt is not None, high))
    return out


SETTINGS = _settings()
SETTING_NAMES = [s.name for s in SETTINGS]
CROSS_FIELD = {"global_batch_size", "n_checkpoints", "packing_buffer_size", "packing", "data_partitions"}
"""Where the rules between settings put their issues."""

words = st.text(string.ascii_letters + string.digits + "_", max_size=8)
letters = st.text(string.ascii_letters, min_size=1, max_size=8)


def valid_value(s: Setting) -> st.SearchStrategy[Any]:
    if s.kind == "bool":
        values: st.SearchStrategy[Any] = st.booleans()
    elif s.kind == "number":
        low = s.low if s.low is not None else -1e6
        high = min(1e6, s.high) if s.high is not None else 1e6
        values = st.floats(low, high, exclude_min=s.strict_low) | st.integers(
            math.floor(low) + 1, math.floor(high)
        )
    else:
        low = int(s.low) if s.low is not None else -(10**6)
        high = int(s.high) if s.high is not None else low + 10**4
        values = st.integers(low, min(low + 8, high)) | st.integers(low, min(low + 10**4, high))
    return values | st.none() if s.nullable else values


def invalid_value(s: Setting) -> st.SearchStrategy[Any]:
    """Values the shared validation must refuse for ``s``."""
    if s.kind == "bool":
        bad: st.SearchStrategy[Any] = st.integers() | words | st.floats(allow_nan=False)
    elif s.kind == "number":
        assert s.low is not None
        bad = (
            st.booleans()
            | words
            | st.lists(st.integers(), max_size=2)
            | st.floats(max_value=s.low, exclude_max=not s.strict_low, allow_nan=False)
            | st.integers(max_value=math.ceil(s.low) - (0 if s.strict_low else 1))
        )
        if s.high is not None:  # an upper bound too (checkpoint_every_sec)
            bad |= st.floats(min_value=s.high, exclude_min=True) | st.integers(
                min_value=math.floor(s.high) + 1
            )
    else:
        bad = (
            st.booleans()
            | st.floats(allow_nan=False)
            | st.integers().map(str)
            | words
            | st.lists(st.integers(), max_size=2)
        )
        if s.low is not None:  # a bounded integer (ignore_index is not)
            bad |= st.integers(max_value=int(s.low) - 1)
        if s.high is not None:  # every count has an upper bound (seq_length: 1e26 is a typo)
            bad |= st.integers(min_value=int(s.high) + 1)
    return bad if s.nullable else bad | st.none()


SETTING_BY_NAME = {s.name: s for s in SETTINGS}

# -- (a) the config file and the constructor share one validation ---------------------------------

ENERGON_GOOD = sorted(ENERGON_DATASET_ARGUMENTS)
ENERGON_BAD = ["batch_size", "handler", "limit", "shuffle_over_epochs", "bogus_key"]
"""Reserved, refused and unknown names: not the constructor's own keywords."""

sample_configs = st.fixed_dictionaries(
    {},
    optional={
        "image_token": st.sampled_from(["<image>", "<img>", "", " <image>", "<video>"]),
        "ignore_index": st.integers(-200, 3) | st.sampled_from([2.5, "x"]),
        "image_token_id": st.none() | st.integers(-2, 40),
        "image_following_text": st.booleans(),
    },
)


def _constructor_blames(message: str, names: set[str]) -> set[str]:
    """The keywords a constructor ``ConfigError`` names (``Who: key: msg; key: msg``)."""
    body = message.split(": ", 1)[1]
    return {name for name in names if body.startswith(f"{name}: ") or f"; {name}: " in body}


def _config_blames(issues: list[Any]) -> set[str]:
    """The constructor keyword each config issue is about."""
    out = set()
    for issue in issues:
        head, _, rest = issue.path.partition(".")
        out.add({"sample_config": "multimodal_sample_config", "energon": rest}.get(head, head))
    return out


@prop(120)
@given(data=st.data())
def test_config_file_and_constructor_accept_and_refuse_alike(workspace: Path, data: Any) -> None:
    from energon_plugins.loading.datamodule import EnergonMultiModalDataModule

    kept = data.draw(st.lists(st.sampled_from(SETTINGS), unique=True), label="set")
    values = {s.name: data.draw(valid_value(s), label=s.name) for s in kept}
    broken = data.draw(st.lists(st.sampled_from(SETTINGS), unique=True, max_size=2), label="bad")
    packing = data.draw(st.booleans(), label="packing")
    if data.draw(st.booleans(), label="consistent"):  # mostly keep the rules between settings
        packing = values.get("packing_buffer_size") is not None
        micro, workers = values.get("micro_batch_size", 1), values.get("num_workers", 1)
        if values.get("global_batch_size") is not None:
            values["global_batch_size"] = micro * data.draw(st.integers(1, 8), label="multiple")
        if values.get("n_checkpoints") is not None:
            values["n_checkpoints"] = max(values["n_checkpoints"], 2 * max(workers, 1) + 1)
    values.update({s.name: data.draw(invalid_value(s), label=s.name) for s in broken})
    sample_config = data.draw(st.none() | sample_configs, label="sample_config")
    energon = data.draw(
        st.dictionaries(
            st.sampled_from(ENERGON_GOOD) | st.sampled_from(ENERGON_BAD), st.integers(0, 5), max_size=2
        ),
        label="energon",
    )

    config = {**BASE, **values}
    if packing:
        config["packing"] = {"name": "first-fit-decreasing"}
    if sample_config is not None:
        config["sample_config"] = sample_config
    if energon:
        config["energon"] = energon
    file = write(workspace, config)

    issues = None
    try:
        loaded = load_config(file)
    except ConfigValidationError as exc:
        issues = exc.issues
        assert str(file) in str(exc)
    refused = None
    try:
        EnergonMultiModalDataModule(
            path=str(workspace / "missing"),
            tokenizer=None,
            packing="first-fit-decreasing" if packing else None,
            multimodal_sample_config=sample_config,
            **values,
            **energon,
        )
    except DatasetError:
        pass  # every argument passed; then the (missing) dataset was checked
    except ConfigError as exc:
        refused = str(exc)
    assert (issues is None) == (refused is None), (
        f"config file: {issues or 'accepted'}; constructor: {refused or 'accepted'}"
    )

    event("accepted" if issues is None else "refused")
    if issues is None:
        expected = {**LoaderSettings().model_dump(), **values}
        assert {name: getattr(loaded, name) for name in SETTING_NAMES} == expected
        assert loaded.sample_config == MultiModalSampleConfig(**(sample_config or {}))
        assert loaded.energon == energon
        assert dump(load_config(config, base_dir=workspace)) == dump(loaded)
        return
    names = {*SETTING_NAMES, "multimodal_sample_config", "packing", *ENERGON_GOOD, *ENERGON_BAD}
    by_constructor = _constructor_blames(refused, names)
    by_config = _config_blames(issues)
    assert by_constructor <= by_config, (refused, issues)
    # The constructor checks the rules between settings only once every field is valid.
    assert by_config - by_constructor <= CROSS_FIELD, (refused, issues)
    try:
        MultiModalSampleConfig(**(sample_config or {}))
        well_typed = not broken
    except pydantic.ValidationError:
        well_typed = False
    if well_typed and set(energon) <= set(ENERGON_GOOD) and not energon_value_issues(energon):
        event("refused by a rule between settings")
        assert by_config == by_constructor, (refused, issues)


# -- (b) overrides --------------------------------------------------------------------------------

identifiers = st.text(string.ascii_lowercase + "_", min_size=1, max_size=6)
dotted_keys = st.lists(identifiers, min_size=1, max_size=3).map(".".join)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
)
yaml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(identifiers, inner, max_size=3),
    max_leaves=8,
)


@prop(150)
@given(key=dotted_keys, value=yaml_values, pad=st.sampled_from(["", " "]))
def test_set_option_reads_back_the_value_written(key: str, value: Any, pad: str) -> None:
    assert parse_set_option(f"{pad}{key}{pad}={flow(value)}") == (key, value)


LEAF_PATHS = [
    *SETTING_NAMES,
    "path",
    "tokenizer.path",
    "sample_config.image_token",
    "sample_config.ignore_index",
    "sample_config.conversation_template.system_prompt",
    "task_encoder.name",
    "task_encoder.options.image_tokens",
    "task_encoder.options.truncation",
    "image_processor.name",
    "image_processor.options.class_name",
    "validation_task_encoder.name",
    "validation_task_encoder.options.on_error",
    "packing",
    "packing.name",
    "packing.options.overlong",
    "batch_format",
    "batch_format.name",
    "energon.virtual_epoch_length",
]
PLUGIN_NAMES = st.sampled_from(
    [
        "multimodal",
        "energon-plugins:multimodal",
        "llava",
        "hf",
        "fast-clip",
        "first-fit-decreasing",
        "greedy-knapsack",
        "megatron-lm",
    ]
)
small_options = st.dictionaries(identifiers, st.integers(0, 9), max_size=2)
leaf_values = (
    st.none()
    | st.integers(-3, 4096)
    | PLUGIN_NAMES
    | words
    | st.fixed_dictionaries({"name": PLUGIN_NAMES}, optional={"options": small_options})
)

base_configs = st.fixed_dictionaries(
    FIXED_BASE,
    optional={
        "seq_length": st.integers(1, 4096),
        "task_encoder": st.fixed_dictionaries(
            {},
            optional={
                "name": PLUGIN_NAMES,
                "options": st.dictionaries(identifiers, st.integers(0, 9), max_size=3),
            },
        ),
        "image_processor": st.fixed_dictionaries(
            {"name": PLUGIN_NAMES},
            optional={
                "options": st.dictionaries(identifiers, words, max_size=2),
            },
        ),
        "packing": st.none()
        | st.fixed_dictionaries(
            {"name": PLUGIN_NAMES},
            optional={
                "options": st.dictionaries(identifiers, st.integers(0, 9), max_size=2),
            },
        ),
        "sample_config": st.fixed_dictionaries({}, optional={"image_token": words}),
        "energon": st.dictionaries(identifiers, st.integers(0, 9), max_size=2),
    },
)


def _independent(paths: list[str]) -> bool:
    """No path is a prefix of another (each override reaches its own value)."""
    return not any(a != b and b.startswith(a + ".") for a in paths for b in paths)


def overrides_from(paths: st.SearchStrategy[list[str]]) -> st.SearchStrategy[dict[str, Any]]:
    return paths.filter(_independent).flatmap(
        lambda keys: st.fixed_dictionaries({key: leaf_values for key in keys})
    )


some_paths = st.lists(st.sampled_from(LEAF_PATHS), unique=True, max_size=6)


@prop(150)
@given(base=base_configs, overrides=overrides_from(some_paths), data=st.data())
def test_overrides_applied_together_are_order_free_and_idempotent(
    base: dict[str, Any], overrides: dict[str, Any], data: Any
) -> None:
    together = apply_overrides(base, overrides)
    shuffled = dict(data.draw(st.permutations(list(overrides.items())), label="order"))
    assert apply_overrides(base, shuffled) == together
    assert apply_overrides(together, overrides) == together
    assert apply_overrides(base, {}) == base


no_names = st.lists(
    st.sampled_from([p for p in LEAF_PATHS if not p.endswith(".name")]), unique=True, max_size=6
)


@prop(150)
@given(base=base_configs, overrides=overrides_from(no_names))
def test_overrides_one_by_one_equal_overrides_together(
    base: dict[str, Any], overrides: dict[str, Any]
) -> None:
    # No ".name" override here: one by one, switching a selection's plugin after an override
    # set its options drops them (rule 2 of overrides.py); together they are kept.
    one_by_one = base
    for key, value in overrides.items():
        one_by_one = apply_overrides(one_by_one, {key: value})
    assert one_by_one == apply_overrides(base, overrides)


def _padded(names: list[str]) -> st.SearchStrategy[str]:
    return st.tuples(
        st.sampled_from(names), st.sampled_from(["", " ", "  "]), st.sampled_from(["", " "])
    ).map(lambda t: t[1] + t[0] + t[2])


valid_configs = st.fixed_dictionaries(
    FIXED_BASE,
    optional={
        **{s.name: valid_value(s) for s in SETTINGS if s.name not in CROSS_FIELD},
        "micro_batch_size": st.integers(1, 8),
        "task_encoder": st.fixed_dictionaries(
            {"name": _padded(["multimodal", "energon-plugins:multimodal", "default"])},
            optional={
                "options": st.fixed_dictionaries(
                    {},
                    optional={
                        "image_tokens": st.none() | st.integers(1, 600),
                        "truncation": st.sampled_from(["right", "drop", "error"]),
                        "patch_size": st.integers(1, 32),
                    },
                )
            },
        ),
        "image_processor": st.fixed_dictionaries({"name": _padded(["fast-clip", "hf"])}),
        "validation_task_encoder": st.fixed_dictionaries(
            {},
            optional={
                "options": st.fixed_dictionaries(
                    {}, optional={"on_error": st.sampled_from(["skip", "raise"])}
                ),
            },
        ),
        "sample_config": st.fixed_dictionaries(
            {},
            optional={
                "image_token": st.sampled_from(["<image>", "<img>"]),
                "ignore_index": st.integers(-200, -1),
            },
        ),
        "energon": st.fixed_dictionaries(
            {}, optional={"virtual_epoch_length": st.integers(0, 9), "repeat": st.booleans()}
        ),
    },
)


SELECTION_KEYS = {"task_encoder", "validation_task_encoder", "image_processor", "packing", "batch_format"}


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out.update(_leaves(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


@prop(100)
@given(config=valid_configs, packing=st.booleans(), data=st.data())
def test_overriding_a_key_with_its_own_value_changes_nothing(
    workspace: Path, config: dict[str, Any], packing: bool, data: Any
) -> None:
    if packing:
        config = {
            **config,
            "packing": {"name": "first-fit-decreasing", "options": {"overlong": "drop"}},
            "packing_buffer_size": 4,
        }
    file = write(workspace, config)
    loaded = load_config(file)
    leaves = _leaves(dump(loaded))
    selections = sorted(k for k in leaves if k.split(".")[0] in SELECTION_KEYS)
    keys = data.draw(
        st.lists(
            st.sampled_from(selections) | st.sampled_from(sorted(leaves)), unique=True, min_size=1, max_size=8
        ),
        label="keys",
    )
    same = {key: leaves[key] for key in keys}
    assert dump(load_config(file, same)) == dump(loaded)
    from_cli = dict(parse_set_option(f"{key}={flow(value)}") for key, value in same.items())
    assert dump(load_config(file, from_cli)) == dump(loaded)
    # A validated config is a source too: re-validating it with its own values is the identity.
    assert dump(load_config(loaded, same)) == dump(loaded)


# -- (c) a bad integer is refused, naming its dotted path ----------------------------------------


def _nested_integers() -> list[tuple[str, Setting]]:
    """Integer fields below the top level: the sample config and built-in plugin options."""
    out = []
    for prefix, model in (
        ("sample_config", MultiModalSampleConfig),
        ("task_encoder.options", MultimodalOptions),
        ("packing.options", FirstFitDecreasingOptions),
    ):
        for name, field in model.model_fields.items():
            args = set(typing.get_args(field.annotation)) or {field.annotation}
            if int not in args:
                continue
            low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
            out.append((f"{prefix}.{name}", Setting(name, "int", type(None) in args, low, False)))
    return out


NESTED_INTEGERS = _nested_integers()


def set_in(config: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``config`` with ``dotted`` set (built by hand, not by the code under test)."""
    out = json.loads(json.dumps(config))
    node = out
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return out


top_level_bad = st.sampled_from([s for s in SETTINGS if s.kind == "int"]).flatmap(
    lambda s: st.tuples(st.just(s.name), invalid_value(s))
)
nested_bad = st.sampled_from(NESTED_INTEGERS).flatmap(
    lambda item: st.tuples(st.just(item[0]), invalid_value(item[1]))  # as strict as top level
)


@prop(120)
@given(case=top_level_bad | nested_bad, via_cli=st.booleans())
def test_a_bad_integer_is_refused_naming_its_path(
    workspace: Path, case: tuple[str, Any], via_cli: bool
) -> None:
    path, value = case
    assume(not (isinstance(value, float) and math.isnan(value)))
    with pytest.raises(ConfigValidationError) as caught:
        if via_cli:
            load_config(write(workspace, PACKED), dict([parse_set_option(f"{path}={flow(value)}")]))
        else:
            load_config(write(workspace, set_in(PACKED, path, value)))
    assert path in [issue.path for issue in caught.value.issues], caught.value.issues
    assert f"  {path}: " in str(caught.value)


# -- (d) any text loads or raises ConfigError naming the file ------------------------------------

CONFIG_KEYS = [
    *SETTING_NAMES,
    *BASE,
    "sample_config",
    "image_processor",
    "task_encoder",
    "validation_task_encoder",
    "packing",
    "batch_format",
    "energon",
    "name",
    "options",
    "image_token",
    "conversation_template",
    "image_tokens",
    "a.b",
]
keys = st.sampled_from(CONFIG_KEYS) | identifiers
yaml_trees = st.recursive(
    scalars | PLUGIN_NAMES | st.sampled_from(["data.jsonl", "tok", ".", "/"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
TOKENS = [
    "",
    " ",
    "  ",
    "\n",
    "\n  ",
    ": ",
    ":",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "<<: ",
    "!!str ",
    "!!int ",
    "!!bool ",
    "!!float ",
    "!!binary ",
    "!!set ",
    "!!omap ",
    "!custom ",
    "|",
    ">",
    "'",
    '"',
    "#",
    "?",
    "%YAML 1.1\n",
    "---\n",
    "...\n",
    "~",
    "null",
    "yes",
    "0x1f",
    "0x_",
    "0b_",
    "1_000",
    "1:30",
    ".inf",
    "-.nan",
    "2020-01-01",
    "2020-02-30",
    "1e3",
    "1.5e3",
    "\\0",
    "\t",
    "@",
    "`",
    "%",
    *CONFIG_KEYS,
]
TOP_KEYS = [*SETTING_NAMES, *DataModuleConfig.model_fields]
near_valid = st.fixed_dictionaries(
    FIXED_BASE, optional={key: yaml_trees for key in TOP_KEYS if key not in BASE}
)
yaml_texts = (
    st.tuples(near_valid, st.sampled_from([None, True, False])).map(
        lambda t: yaml.safe_dump(t[0], default_flow_style=t[1], sort_keys=False)
    )
    | st.tuples(yaml_trees, st.sampled_from([None, True, False])).map(
        lambda t: yaml.safe_dump(t[0], default_flow_style=t[1], sort_keys=False)
    )
    | st.lists(st.sampled_from(TOKENS) | words, max_size=30).map("".join)
    | st.lists(
        st.sampled_from(CONFIG_KEYS).map(lambda k: f"{k}: ") | st.sampled_from(TOKENS) | words, max_size=20
    ).map("\n".join)
)


@prop(200)
@given(text=yaml_texts)
def test_any_yaml_text_loads_or_names_the_file(workspace: Path, text: str) -> None:
    file = write(workspace, text)
    try:
        loaded = load_config(file)
    except ConfigError as exc:
        event("refused")
        assert str(file) in str(exc)
    else:
        event("loaded")
        assert loaded.seq_length >= 1


@prop(60)
@given(tree=yaml_trees)
def test_any_json_text_loads_or_names_the_file(workspace: Path, tree: Any) -> None:
    text = json.dumps(tree)
    file = write(workspace, text, name="config.json")
    try:
        load_config(file)
    except ConfigError as exc:
        assert str(file) in str(exc)


# -- bugs found by the properties above -------------------------------------------------


@pytest.mark.parametrize(
    "text, json_format",
    [
        ("seq_length: 2020-02-30", False),  # a date that does not exist
        ("seq_length: 0x_", False),  # the int resolver matches, int("", 16) fails
        ("seq_length: !!int x", False),
        ("seq_length: !!float x", False),
        ("pin_memory: !!bool maybe", False),  # KeyError
        ("seq_length: !!int", False),  # IndexError
        ("seq_length: !!timestamp x", False),  # AttributeError
        ("seq_length: " + "1" * 5000, False),
        ('{"seq_length": ' + "1" * 5000 + "}", True),
    ],
)
def test_yaml_values_python_cannot_build_are_a_config_error(
    workspace: Path, text: str, json_format: bool
) -> None:
    file = write(workspace, text, name="config.json" if json_format else "config.yaml")
    with pytest.raises(ConfigError, match="config.json" if json_format else "config.yaml"):
        load_config(file)


@pytest.mark.parametrize("key", ["path", "tokenizer.path"])
@pytest.mark.parametrize("value", ["d" * 300, "~no_such_user_here/x"])
def test_odd_paths_are_a_config_error(workspace: Path, key: str, value: str) -> None:
    with pytest.raises(ConfigValidationError) as caught:
        load_config(set_in(BASE, key, value), base_dir=workspace)
    assert key in [issue.path for issue in caught.value.issues]


@pytest.mark.parametrize(
    "path, value",
    [
        ("task_encoder.options.image_tokens", True),
        ("sample_config.image_token_id", "8"),
        ("packing.options.pad_to_multiple_of", 2.0),
    ],
)
def test_nested_integers_are_as_strict_as_settings(workspace: Path, path: str, value: Any) -> None:
    with pytest.raises(ConfigValidationError) as caught:
        load_config(write(workspace, set_in(PACKED, path, value)))
    assert path in [issue.path for issue in caught.value.issues]


@pytest.mark.parametrize("name", ["energon-plugins:multimodal", "default", " default "])
def test_renaming_the_selected_plugin_keeps_its_options(workspace: Path, name: str) -> None:
    config = {**BASE, "task_encoder": {"name": "multimodal", "options": {"image_tokens": 7}}}
    loaded = load_config(write(workspace, config), {"task_encoder.name": name})
    assert loaded.task_encoder.options == {"image_tokens": 7}


def test_an_alias_selected_in_the_file_and_its_plain_name_in_an_override_are_one_plugin(
    workspace: Path,
) -> None:
    config = {**BASE, "task_encoder": {"name": "default", "options": {"image_tokens": 7}}}
    loaded = load_config(write(workspace, config), {"task_encoder.name": "multimodal"})
    assert loaded.task_encoder.options == {"image_tokens": 7}


@pytest.mark.parametrize("name", ["llava", "no-such-encoder"])
def test_naming_another_or_an_unknown_plugin_still_drops_the_options(workspace: Path, name: str) -> None:
    config = {**BASE, "task_encoder": {"name": "multimodal", "options": {"image_tokens": 7}}}
    data = apply_overrides(config, {"task_encoder.name": name})
    assert data["task_encoder"] == {"name": name}


# -- (e) `validate` on any config or override: exit 0 or 1 with a message, never a traceback ------


def _validate(args: list[str]) -> Any:
    from click.testing import CliRunner

    from energon_plugins.cli import cli

    return CliRunner().invoke(cli, ["validate", "--quick", *args])


def _accepted_or_refused(result: Any) -> str:
    """``"accepted"`` or ``"refused"``; anything else (a traceback, another exit code, an error
    escaping the verb) fails."""
    assert result.exit_code in (0, 1), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output
    assert result.output.strip(), "a verdict is printed"
    if result.exit_code == 0:
        assert ": valid (" in result.output, result.output
        return "accepted"
    assert "error" in result.output.lower(), result.output
    return "refused"


@prop(60)
@given(tree=near_valid | yaml_trees, as_json=st.booleans())
def test_validate_accepts_or_refuses_any_mapping(workspace: Path, tree: Any, as_json: bool) -> None:
    file = write(workspace, json.dumps(tree) if as_json else tree, name="cli.json" if as_json else "cli.yaml")
    event(_accepted_or_refused(_validate([str(file)])))


@prop(60)
@given(text=yaml_texts)
def test_validate_accepts_or_refuses_any_text(workspace: Path, text: str) -> None:
    event(_accepted_or_refused(_validate([str(write(workspace, text, name="cli.yaml"))])))


set_texts = st.lists(st.sampled_from(TOKENS) | words, max_size=6).map("".join)
set_keys = (
    dotted_keys
    | st.sampled_from(LEAF_PATHS)
    | st.lists(st.sampled_from(["", "a", ".", " "]), max_size=4).map("".join)
)


@prop(60)
@given(
    items=st.lists(
        st.tuples(set_keys, st.sampled_from(["=", ""]), yaml_values.map(flow) | set_texts).map("".join),
        max_size=3,
    )
)
def test_validate_accepts_or_refuses_any_set_override(workspace: Path, items: list[str]) -> None:
    config = write(workspace, BASE, name="base.yaml")
    args = [str(config)]
    for item in items:
        args += ["--set", item]
    event(_accepted_or_refused(_validate(args)))
