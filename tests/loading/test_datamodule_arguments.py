"""The constructor is as strict as the config file: one validation, one paragraph naming the field.

Bad calls are table-driven: each row names the exception and the exact ``field: message`` the
paragraph must hold. The same rules run for the config (``energon_plugins.config``), so a value
refused here is refused there with the same words. The Energon-argument table is checked against
the installed Energon's signatures and by really calling its dataset factories.
"""

import inspect
import subprocess
import sys
import types

import pytest

import energon_plugins
from energon_plugins import ConfigError, PluginNotFoundError, PluginOptionsError
from tests._refusals import assert_refusal, unchanged


class Group:
    def __init__(self, rank=0, size=1):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


class Broken:
    def rank(self):
        raise RuntimeError("not in this group")

    def size(self):
        return 2


DP2 = types.SimpleNamespace(dp=Group(0, 2))


class RaisingCollection:
    """A collection whose ``dp`` attribute fails to read (as an unset dataclass field would)."""

    @property
    def dp(self):
        raise RuntimeError("dp was never set")


class NoSelect:
    """An object that is not a packing strategy (``select`` is not callable)."""

    select = 3


def cyclic_dict():
    d = {}
    d["x"] = d
    return d


def cyclic_list():
    items = []
    items.append([items])
    return items


def deep_dict(levels):
    root = node = {}
    for _ in range(levels):
        node["x"] = {}
        node = node["x"]
    return root


def wide_alias_bomb():
    """Nine levels of nine references to the level below: 9**9 values when walked."""
    level = ["x"] * 9
    for _ in range(8):
        level = [level] * 9
    return {"bomb": level}


def energon_task_encoder_class():
    from megatron.energon import DefaultTaskEncoder

    return DefaultTaskEncoder


def transformers_class(name):
    import transformers

    return getattr(transformers, name)


# (keyword arguments, exception, text the message must contain)
BAD_CALLS = [
    ({"seq_length": True}, ConfigError, "seq_length: must be an integer, got True"),
    ({"seq_length": 2048.0}, ConfigError, "seq_length: must be an integer, got 2048.0"),
    ({"micro_batch_size": 0}, ConfigError, "micro_batch_size: Input should be greater than or equal to 1"),
    ({"num_workers": "2"}, ConfigError, "num_workers: must be an integer, got '2'"),
    ({"num_val_workers": -1}, ConfigError, "num_val_workers: Input should be greater than or equal to 0"),
    ({"pin_memory": "yes"}, ConfigError, "pin_memory: must be true or false, got 'yes'"),
    ({"shuffle_buffer_size": -3}, ConfigError, "shuffle_buffer_size: Input should be greater"),
    ({"max_samples_per_sequence": 0}, ConfigError, "max_samples_per_sequence: Input should be"),
    ({"decoder_seq_length": 0}, ConfigError, "decoder_seq_length: Input should be"),
    ({"packing_buffer_size": 0}, ConfigError, "packing_buffer_size: Input should be"),
    ({"sequence_parallel": 1}, ConfigError, "sequence_parallel: must be true or false, got 1"),
    ({"val_batches_per_evaluation": 0}, ConfigError, "val_batches_per_evaluation: Input should be"),
    (
        {"checkpoint_every_sec": -1},
        ConfigError,
        "checkpoint_every_sec: Input should be greater than or equal to 0",
    ),
    ({"checkpoint_every_sec": "5"}, ConfigError, "checkpoint_every_sec: must be a number, got '5'"),
    ({"checkpoint_every_min_n_samples": 0}, ConfigError, "checkpoint_every_min_n_samples: Input"),
    ({"n_checkpoints": True}, ConfigError, "n_checkpoints: must be an integer, got True"),
    (
        {"n_checkpoints": 3, "num_workers": 2},
        ConfigError,
        "n_checkpoints: 3 is too few for num_workers=2: Energon keeps at least 2 x max(num_workers, "
        "1) + 1 = 5",
    ),
    (
        {"global_batch_size": 3, "micro_batch_size": 2},
        ConfigError,
        "global_batch_size: 3 must be a multiple of micro_batch_size (2)",
    ),
    (
        {"global_batch_size": 6, "micro_batch_size": 2, "pg_collection": DP2},
        ConfigError,
        "global_batch_size: 6 must be a multiple of micro_batch_size x data-parallel size (2 x 2 = 4)",
    ),
    (
        {"validation_mode": "sometimes"},
        ConfigError,
        "validation_mode: must be 'finite' or 'infinite', got 'sometimes'",
    ),
    (
        {"multimodal_sample_config": 3},
        ConfigError,
        "multimodal_sample_config: must be a MultiModalSampleConfig or a mapping, got int",
    ),
    (
        {"multimodal_sample_config": {"ignore_index": "x"}},
        ConfigError,
        "multimodal_sample_config: ignore_index",
    ),
    ({"image_processor": 2048}, ConfigError, "image_processor: must be callable"),
    ({"image_processor": 2048}, ConfigError, "seq_length passed positionally"),
    ({"packing": 3}, ConfigError, "packing: expected a registered packing strategy name"),
    (
        {"packing": "ffd"},
        ConfigError,
        "packing_buffer_size: a packing strategy is selected but packing_buffer_size is not set",
    ),
    (
        {"packing_buffer_size": 8},
        ConfigError,
        "packing: packing_buffer_size is 8 but no packing strategy is selected",
    ),
    ({"packing": "fdd", "packing_buffer_size": 8}, PluginNotFoundError, "fdd"),
    (
        {"packing": {"name": "ffd", "option": {}}, "packing_buffer_size": 8},
        ConfigError,
        "packing: expected {name, options}",
    ),
    ({"task_encoder": "multimodl"}, PluginNotFoundError, "multimodl"),
    (
        {"checkpoint_every_secs": 5},
        ConfigError,
        "checkpoint_every_secs: unknown keyword argument (did you mean 'checkpoint_every_sec'?)",
    ),
    (
        {"micro_batchsize": 2},
        ConfigError,
        "micro_batchsize: unknown keyword argument (did you mean 'micro_batch_size'?)",
    ),
    ({"batch_size": 4}, ConfigError, "batch_size: is set by the datamodule itself; use 'micro_batch_size'"),
    ({"limit": 4}, ConfigError, "limit: is set by the datamodule itself; use 'val_batches_per_evaluation'"),
    ({"handler": print}, ConfigError, "handler: not accepted: Energon 7.4 ignores it"),
    ({"image_decode": "pil"}, ConfigError, "image_decode: not accepted: deprecated by Energon"),
    (
        {"shuffle_over_epochs": 2},
        ConfigError,
        "shuffle_over_epochs: not accepted: named shuffle_over_epochs_multiplier",
    ),
    (
        {"pg_collection": types.SimpleNamespace(dp=Broken())},
        ConfigError,
        "pg_collection.dp: expected a process group answering rank() and size(), got Broken",
    ),
    (
        {"pg_collection": types.SimpleNamespace(dp=Group(3, 2))},
        ConfigError,
        "pg_collection.dp: rank 3 of size 2 is not valid",
    ),
    # --- component arguments of the wrong type (issue 27): the argument, the type, what is accepted
    ({"task_encoder": 42}, ConfigError, "task_encoder: expected a registered task encoder name"),
    ({"task_encoder": 42}, ConfigError, "a megatron.energon TaskEncoder object, or None; got int"),
    ({"task_encoder": 2.5}, ConfigError, "task_encoder: expected a registered task encoder name"),
    ({"task_encoder": [1, 2]}, ConfigError, "task_encoder: expected a registered task encoder name"),
    ({"task_encoder": object()}, ConfigError, "got object"),
    ({"task_encoder": True}, ConfigError, "task_encoder: expected a registered task encoder name"),
    ({"task_encoder": print}, ConfigError, "got builtin_function_or_method"),
    ({"task_encoder": "energon_task_encoder_class"}, ConfigError, "the class DefaultTaskEncoder itself"),
    ({"task_encoder": {"name": 42}}, ConfigError, "task_encoder: name must be a registered plugin name"),
    ({"task_encoder": {"name": ""}}, ConfigError, "task_encoder: name must be a registered plugin name"),
    ({"task_encoder": {"options": {}}}, ConfigError, "task_encoder: expected {name, options}"),
    ({"task_encoder": {"name": "multimodal", "opts": {}}}, ConfigError, "task_encoder: expected {name"),
    (
        {"task_encoder": {"name": "multimodal", "options": 42}},
        PluginOptionsError,
        "options must be a mapping",
    ),
    ({"validation_task_encoder": 42}, ConfigError, "validation_task_encoder: expected a registered task"),
    ({"validation_task_encoder": b"multimodal"}, ConfigError, "validation_task_encoder: expected"),
    ({"validation_task_encoder": {"name": None}}, ConfigError, "validation_task_encoder: name must be"),
    ({"validation_task_encoder": "multimodl"}, PluginNotFoundError, "multimodl"),
    ({"tokenizer": 42}, ConfigError, "tokenizer: must be a loaded tokenizer (a Hugging Face tokenizer"),
    ({"tokenizer": "/models/llava"}, ConfigError, "tokenizer: must be a loaded tokenizer"),
    ({"tokenizer": "/models/llava"}, ConfigError, "AutoTokenizer.from_pretrained(path)"),
    ({"tokenizer": {"path": "/models/llava"}}, ConfigError, "tokenizer: must be a loaded tokenizer"),
    ({"tokenizer": ["a", "b"]}, ConfigError, "got list"),
    ({"tokenizer": object()}, ConfigError, "tokenizer: must be a loaded tokenizer"),
    ({"tokenizer": "PreTrainedTokenizerFast"}, ConfigError, "tokenizer: must be a loaded tokenizer"),
    ({"image_processor": "CLIPImageProcessor"}, ConfigError, "image_processor: must be callable"),
    ({"image_processor": "CLIPImageProcessor"}, ConfigError, "itself (pass an instance of it)"),
    ({"image_processor": "/models/clip"}, ConfigError, "energon_plugins.create('image_processor'"),
    ({"image_processor": {"name": "hf"}}, ConfigError, "image_processor: must be callable"),
    ({"image_processor": 1.5}, ConfigError, "image_processor: must be callable"),
    (
        {"packing": "NoSelect", "packing_buffer_size": 4},
        ConfigError,
        "packing: expected a registered packing",
    ),
    ({"packing": NoSelect(), "packing_buffer_size": 4}, ConfigError, "got NoSelect"),
    ({"packing": [1], "packing_buffer_size": 4}, ConfigError, "packing: expected a registered packing"),
    ({"packing": {"name": 3}, "packing_buffer_size": 4}, ConfigError, "packing: name must be a registered"),
    (
        {"packing": {"options": {}}, "packing_buffer_size": 4},
        ConfigError,
        "packing: expected {name, options}",
    ),
    ({"batch_format": 42}, ConfigError, "batch_format: expected a registered batch format name"),
    ({"batch_format": 42}, ConfigError, "a callable fmt(batch), or None; got int"),
    ({"batch_format": [1]}, ConfigError, "batch_format: expected a registered batch format name"),
    ({"batch_format": {"name": 7}}, ConfigError, "batch_format: name must be a registered plugin name"),
    ({"batch_format": {"nam": "hf"}}, ConfigError, "batch_format: expected {name, options}"),
    ({"batch_format": "megatron-bridg"}, PluginNotFoundError, "megatron-bridg"),
    ({"device": "bogus"}, ConfigError, "device: 'bogus' is not a device torch knows"),
    ({"device": -1}, ConfigError, "device: -1 is not a device torch knows"),
    ({"device": 1.5}, ConfigError, "device: expected a torch.device"),
    ({"device": True}, ConfigError, "device: expected a torch.device"),
    ({"device": ["cuda"]}, ConfigError, "device: expected a torch.device"),
    # --- pg_collection: refused when it provides none of the groups read (issue 27)
    (
        {"pg_collection": object()},
        ConfigError,
        "pg_collection: expected a megatron-core ProcessGroupCollection",
    ),
    ({"pg_collection": object()}, ConfigError, "Got object with none of dp, cp, tp"),
    ({"pg_collection": 1}, ConfigError, "pg_collection: expected a megatron-core ProcessGroupCollection"),
    ({"pg_collection": {"dp": Group()}}, ConfigError, "Got a mapping with none of dp, cp, tp"),
    ({"pg_collection": types.SimpleNamespace(dpp=Group())}, ConfigError, "with none of dp, cp, tp"),
    (
        {"pg_collection": types.SimpleNamespace(dp=None)},
        ConfigError,
        "pg_collection: expected a megatron-core",
    ),
    ({"pg_collection": RaisingCollection()}, ConfigError, "Got RaisingCollection with none of dp, cp, tp"),
    (
        {"pg_collection": types.SimpleNamespace(dp=42)},
        ConfigError,
        "pg_collection.dp: expected a process group answering rank() and size(), got int",
    ),
    (
        {"pg_collection": types.SimpleNamespace(dp=Group(), cp="cp")},
        ConfigError,
        "pg_collection.cp: expected a process group answering rank() and size(), got str",
    ),
    (
        {"pg_collection": types.SimpleNamespace(dp=Group(), tp=object())},
        ConfigError,
        "pg_collection.tp: expected a process group",
    ),
    ({"pg_collection": types.SimpleNamespace(dp=Group(0, 0))}, ConfigError, "rank 0 of size 0 is not valid"),
    # --- shuffle_buffer_size: bounded (the config's MAX_SHUFFLE_BUFFER_SIZE), so 1e18 cannot hang
    ({"shuffle_buffer_size": 10**18}, ConfigError, "shuffle_buffer_size: Input should be less than or equal"),
    ({"shuffle_buffer_size": 10**18}, ConfigError, "Energon fills the whole buffer"),
    ({"shuffle_buffer_size": 1e18}, ConfigError, "shuffle_buffer_size: must be an integer, got 1e+18"),
    (
        {"shuffle_buffer_size": 2**20 + 1},
        ConfigError,
        "shuffle_buffer_size: Input should be less than or equal",
    ),
    ({"shuffle_buffer_size": float("inf")}, ConfigError, "shuffle_buffer_size: must be an integer"),
    # --- mapping and list arguments that contain themselves, nest or expand without bound
    ({"subflavors": "cyclic_dict"}, ConfigError, "subflavors: contains itself"),
    ({"subflavors": {"a": "cyclic_list"}}, ConfigError, "subflavors: contains itself"),
    ({"multimodal_sample_config": "cyclic_dict"}, ConfigError, "multimodal_sample_config: contains itself"),
    (
        {"task_encoder": {"name": "multimodal", "options": "cyclic_dict"}},
        ConfigError,
        "task_encoder: contains itself",
    ),
    (
        {"validation_task_encoder": {"name": "multimodal", "options": "cyclic_dict"}},
        ConfigError,
        "contains itself",
    ),
    (
        {"packing": {"name": "ffd", "options": "cyclic_dict"}, "packing_buffer_size": 4},
        ConfigError,
        "packing: contains itself",
    ),
    (
        {"batch_format": {"name": "hf", "options": "cyclic_dict"}},
        ConfigError,
        "batch_format: contains itself",
    ),
    ({"part_filter": "cyclic_list"}, ConfigError, "part_filter: contains itself"),
    ({"seq_length": "cyclic_list"}, ConfigError, "seq_length: contains itself"),
    ({"subflavors": "deep_dict"}, ConfigError, "subflavors: nests mappings or lists deeper than 64 levels"),
    ({"multimodal_sample_config": "deep_dict"}, ConfigError, "multimodal_sample_config: nests mappings"),
    ({"task_encoder": {"name": "multimodal", "options": "deep_dict"}}, ConfigError, "task_encoder: nests"),
    ({"subflavors": "wide_alias_bomb"}, ConfigError, "subflavors: expands to more than 100000 values"),
    ({"batch_format": {"name": "hf", "options": "wide_alias_bomb"}}, ConfigError, "batch_format: expands"),
    # --- Energon's own-object keywords, checked before Energon asserts on them
    ({"part_filter": 42}, ConfigError, "part_filter: expected a list of part names"),
    ({"part_filter": [1, 2]}, ConfigError, "got a list holding other values than part names"),
    ({"part_filter": {"jpg"}}, ConfigError, "part_filter: expected a list of part names"),
    ({"subset": 42}, ConfigError, "subset: expected Energon's DatasetSubset"),
    ({"subset": {"range": [0, 1]}}, ConfigError, "subset: expected Energon's DatasetSubset"),
]
"""Rows whose value is a string naming a builder above (``"cyclic_dict"``, a class name...) get
that value built fresh for the row (see :func:`materialise`)."""

BUILDERS = {
    "cyclic_dict": cyclic_dict,
    "cyclic_list": cyclic_list,
    "deep_dict": lambda: deep_dict(200),
    "wide_alias_bomb": wide_alias_bomb,
    "energon_task_encoder_class": energon_task_encoder_class,
    "NoSelect": lambda: NoSelect,
    "CLIPImageProcessor": lambda: transformers_class("CLIPImageProcessor"),
    "PreTrainedTokenizerFast": lambda: transformers_class("PreTrainedTokenizerFast"),
}


def materialise(value):
    """``value`` with every builder name (at the top or inside a ``{name, options}`` mapping or
    a plain mapping) replaced by what the builder returns."""
    if isinstance(value, str) and value in BUILDERS:
        return BUILDERS[value]()
    if isinstance(value, dict):
        return {k: materialise(v) for k, v in value.items()}
    return value


def make(info, default_tokenizer, processor, **kwargs):
    args = dict(
        tokenizer=default_tokenizer,
        image_processor=processor,
        seq_length=300,
        micro_batch_size=1,
        num_workers=0,
    )
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), **args)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "kwargs, error, words", BAD_CALLS, ids=[f"{i}-{next(iter(r[0]))}" for i, r in enumerate(BAD_CALLS)]
)
def test_a_bad_call_is_refused_naming_the_field(vqa_dataset, tokenizer, clip_processor, kwargs, error, words):
    kwargs = {key: materialise(value) for key, value in kwargs.items()}
    with unchanged(vqa_dataset.path), pytest.raises(error) as info:
        make(vqa_dataset, tokenizer, clip_processor, **kwargs)
    message = str(info.value)
    assert words in message, message
    assert_refusal(message, next(iter(kwargs)))  # names the argument, no traceback
    if error is not PluginOptionsError:  # the registry lists each option error on a line
        assert "\n" not in message, "one paragraph"


def test_a_collection_of_stand_ins_and_plain_values_is_still_accepted(vqa_dataset, tokenizer, clip_processor):
    """What the component checks must not refuse: a collection without ``dp`` (``cp`` / ``tp``
    only: the data-parallel world is then torch.distributed's default), an encoder object, a
    callable batch format, a device name, Energon's part names, a self-similar (shared, not
    cyclic) sample config mapping."""
    shared = {"ignore_index": -100}
    dm = make(
        vqa_dataset,
        tokenizer,
        clip_processor,
        pg_collection=types.SimpleNamespace(cp=Group(0, 2), tp=Group(0, 1)),
        task_encoder=energon_task_encoder_class()(),
        batch_format=lambda batch: batch,
        device="cpu",
        part_filter=["jpg", "json"],
        multimodal_sample_config=shared,
        subflavors={"a": shared, "b": shared},
    )
    assert dm.build_context().cp_size == 2 and dm.parallel_layout().dp_size == 1


def test_every_problem_is_named_at_once(vqa_dataset, tokenizer, clip_processor):
    with pytest.raises(ConfigError) as info:
        make(vqa_dataset, tokenizer, clip_processor, seq_length=True, num_workers=-1, checkpoint_every_secs=1)
    message = str(info.value)
    assert message.startswith("EnergonMultiModalDataModule: ")
    for field in ("seq_length:", "num_workers:", "checkpoint_every_secs:"):
        assert field in message


def test_a_missing_image_processor_is_named_when_the_encoder_needs_one(vqa_dataset, tokenizer):
    dm = energon_plugins.EnergonMultiModalDataModule(
        path=str(vqa_dataset.path), tokenizer=tokenizer, num_workers=0
    )
    with pytest.raises(ConfigError, match=r"^image_processor: the multimodal task encoder needs"):
        dm.train_dataloader()


def test_packing_by_name_resolves_through_the_registry(vqa_dataset, tokenizer, clip_processor):
    dm = make(vqa_dataset, tokenizer, clip_processor, packing="ffd", packing_buffer_size=4)
    assert type(dm.packing).__name__ == "FirstFitDecreasing"
    dm = make(
        vqa_dataset,
        tokenizer,
        clip_processor,
        packing_buffer_size=4,
        packing={"name": "best-fit-decreasing", "options": {"carry_over": True}},
    )
    assert type(dm.packing).__name__ == "BestFitDecreasing" and dm.packing.options.carry_over
    assert dm.task_encoder.packing is dm.packing


def test_global_batch_size_defaults_to_micro_batch_times_dp(vqa_dataset, tokenizer, clip_processor):
    assert make(vqa_dataset, tokenizer, clip_processor, micro_batch_size=3).global_batch_size == 3
    dm = make(vqa_dataset, tokenizer, clip_processor, micro_batch_size=3, pg_collection=DP2)
    assert dm.global_batch_size == 6
    assert (
        make(
            vqa_dataset,
            tokenizer,
            clip_processor,
            micro_batch_size=3,
            pg_collection=DP2,
            global_batch_size=12,
        ).global_batch_size
        == 12
    )


def test_numpy_integers_are_integers(vqa_dataset, tokenizer, clip_processor):
    import numpy as np

    assert make(vqa_dataset, tokenizer, clip_processor, seq_length=np.int64(96)).seq_length == 96


def test_loader_checkpoint_options_reach_energons_savable_loader(vqa_dataset, tokenizer, clip_processor):
    dm = make(
        vqa_dataset,
        tokenizer,
        clip_processor,
        num_workers=2,
        checkpoint_every_sec=7.5,
        checkpoint_every_min_n_samples=9,
        n_checkpoints=6,
    )
    wrapper = dm.train_dataloader().dataloader.dataset  # Energon's worker-side wrapper
    assert wrapper.checkpoint_every_sec == 7.5
    assert wrapper.checkpoint_every_min_n_samples == 9
    assert wrapper.n_checkpoints == 6
    dm.close()


# --------------------------------------------------------------------- one rule set, two paths
SHARED = [
    ("seq_length", True),
    ("num_workers", -1),
    ("pin_memory", "yes"),
    ("checkpoint_every_sec", -0.5),
    ("val_batches_per_evaluation", 0),
    ("n_checkpoints", 1.5),
]


@pytest.mark.parametrize("field, value", SHARED, ids=[s[0] for s in SHARED])
def test_config_and_constructor_say_the_same(vqa_dataset, tokenizer, clip_processor, field, value):
    from energon_plugins.config import check_config

    _, issues = check_config(
        {"path": str(vqa_dataset.path), field: value, "tokenizer": {"path": "tok"}}, check_paths=False
    )
    assert [i.path for i in issues] == [field]
    with pytest.raises(ConfigError) as info:
        make(vqa_dataset, tokenizer, clip_processor, **{field: value})
    assert str(issues[0]) in str(info.value)


def test_energon_section_and_keywords_say_the_same(vqa_dataset, tokenizer, clip_processor):
    from energon_plugins.config import check_config

    _, issues = check_config(
        {"path": "x", "tokenizer": {"path": "t"}, "energon": {"virtual_epoch_lenght": 2}}, check_paths=False
    )
    assert [i.path for i in issues] == ["energon.virtual_epoch_lenght"]
    assert "did you mean 'virtual_epoch_length'" in issues[0].message
    with pytest.raises(ConfigError, match="did you mean 'virtual_epoch_length'"):
        make(vqa_dataset, tokenizer, clip_processor, virtual_epoch_lenght=2)


# --------------------------------------------------------------------- Energon's own signatures
def test_the_argument_table_covers_energons_signatures():
    """Every named parameter of Energon's dataset entry points is either accepted, set by the
    datamodule, or refused with a reason; so is every name the table accepts."""
    from megatron.energon import get_train_dataset, get_val_dataset
    from megatron.energon.flavors.webdataset.base_webdataset import BaseWebdatasetFactory
    from megatron.energon.metadataset.loader_interface import DatasetLoaderInterface

    from energon_plugins.config.energon_arguments import (
        ENERGON_DATASET_ARGUMENTS,
        ENERGON_REFUSED,
        ENERGON_RESERVED,
    )

    known = set(ENERGON_DATASET_ARGUMENTS) | set(ENERGON_RESERVED) | set(ENERGON_REFUSED)
    names = set()
    for fn in (
        get_train_dataset,
        get_val_dataset,
        BaseWebdatasetFactory.__init__,
        DatasetLoaderInterface.get_datasets,
    ):
        names |= {
            n
            for n, p in inspect.signature(fn).parameters.items()
            if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
        }
    assert names - known == set(), "an Energon parameter the table does not know"
    assert set(ENERGON_DATASET_ARGUMENTS) <= names | {"dataset_config", "split_config", "part_filter"}


def test_every_accepted_argument_reaches_energons_factories(vqa_dataset, tokenizer, clip_processor):
    """No accepted name comes back as a TypeError from inside Energon's dataset factory."""
    values = {
        "batch_drop_last": False,
        "virtual_epoch_length": 0,
        "shuffle_over_epochs_multiplier": 1,
        "repeat": True,
        "dataset_config": "dataset.yaml",
        "split_config": "split.yaml",
        "subflavors": {"source": "test"},
        "subset": None,
        "parallel_shard_iters": 1,
        "part_filter": None,
    }
    from energon_plugins.config.energon_arguments import ENERGON_DATASET_ARGUMENTS

    assert set(values) == set(ENERGON_DATASET_ARGUMENTS)
    dm = make(vqa_dataset, tokenizer, clip_processor, **values)
    assert next(dm.train_dataloader()) is not None
    assert next(iter(dm.val_dataloader())) is not None


def test_the_shared_settings_are_constructor_keywords():
    from energon_plugins.config.settings import SETTING_NAMES
    from energon_plugins.loading.datamodule import _KEYWORDS

    assert set(SETTING_NAMES) <= set(_KEYWORDS)


# --------------------------------------------------------------------- layering
def test_config_never_imports_loading():
    """config sits below loading (issue 26): importing the config package and reading a config
    imports nothing of loading/, and no module under config/ names it (import-linter's layers
    contract states the same for every layer)."""
    import pathlib

    import energon_plugins.config

    code = (
        "import sys, energon_plugins.config, energon_plugins.config.validate;"
        "print(sorted(m for m in sys.modules if m.startswith('energon_plugins.loading')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    import ast

    folder = pathlib.Path(energon_plugins.config.__file__).parent
    for module in folder.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.startswith("energon_plugins.loading") for n in names), module.name
