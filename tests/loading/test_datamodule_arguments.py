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
from energon_plugins import ConfigError, PluginNotFoundError


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
]


def make(info, tokenizer, processor, **kwargs):
    args = dict(image_processor=processor, seq_length=300, micro_batch_size=1, num_workers=0)
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, **args)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "kwargs, error, words", BAD_CALLS, ids=[f"{i}-{next(iter(r[0]))}" for i, r in enumerate(BAD_CALLS)]
)
def test_a_bad_call_is_refused_naming_the_field(vqa_dataset, tokenizer, clip_processor, kwargs, error, words):
    with pytest.raises(error) as info:
        make(vqa_dataset, tokenizer, clip_processor, **kwargs)
    message = str(info.value)
    assert words in message, message
    assert "\n" not in message, "one paragraph"


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
