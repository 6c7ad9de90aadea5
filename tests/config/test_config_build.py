"""``from_config`` / ``build_datamodule``: overrides validated first, components built late.

Uses the demo metadataset (real Energon shards + prepare index) and a saved offline tokenizer.
"""

import pathlib

import pytest

from energon_plugins import EnergonMultiModalDataModule, MultiModalSampleConfig, build_datamodule
from energon_plugins.config import ConfigValidationError


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> pathlib.Path:
    from energon_plugins.cli.demo_cmd import prepare_demo_data

    root = tmp_path_factory.mktemp("build")
    prepare_demo_data(str(root / "demo"))
    path = root / "config.yaml"
    path.write_text(
        "path: demo/demo.yaml\n"
        "tokenizer: {path: demo/tokenizer}\n"
        "seq_length: 512\n"
        "num_workers: 0\n"
        "task_encoder: {name: multimodal, options: {truncation: right}}\n"
        "sample_config: {ignore_index: -7}\n"
    )
    return path


def test_seq_length_override_reaches_the_built_encoders(config_file):
    dm = EnergonMultiModalDataModule.from_config(config_file, seq_length=640)
    assert dm.seq_length == 640
    train, val = dm.task_encoder, dm.validation_task_encoder
    assert train.context.seq_length == 640 and val.context.seq_length == 640
    assert train.context.split == "train" and val.context.split == "val"
    assert train is not val
    assert dm.multimodal_sample_config.ignore_index == -7
    assert train.context.sample_config.ignore_index == -7
    assert train.context.tokenizer is dm.tokenizer


def test_packing_override_reaches_the_encoder_context(config_file):
    dm = build_datamodule(
        config_file, packing={"name": "bfd", "options": {"sort": False}}, packing_buffer_size=12
    )
    packing = dm.task_encoder.context.packing
    assert packing is not None and packing is dm.packing
    assert type(packing).__name__ == "BestFitDecreasing"
    assert dm.task_encoder.context.packing_buffer_size == 12
    assert dm.validation_task_encoder.context.packing is packing


def test_nested_and_dotted_overrides_keep_the_other_keys(config_file):
    dm = build_datamodule(
        config_file, **{"task_encoder.options.image_tokens": 4}, sample_config={"image_following_text": False}
    )
    assert dm.task_encoder.options.image_tokens == 4
    assert dm.task_encoder.options.truncation == "right"  # from the file, kept
    assert dm.multimodal_sample_config.ignore_index == -7
    assert dm.multimodal_sample_config.image_following_text is False


def test_validation_encoder_selection_gets_its_own_options(config_file):
    dm = build_datamodule(config_file, validation_task_encoder={"options": {"on_error": "raise"}})
    assert dm.validation_task_encoder.options.on_error == "raise"
    assert dm.task_encoder.options.on_error == "skip"


def test_bad_overrides_fail_before_anything_is_built(config_file, monkeypatch):
    import energon_plugins.loading.build as build

    calls = []
    monkeypatch.setattr(build, "build_components", lambda *a, **k: calls.append(a))
    with pytest.raises(ConfigValidationError) as info:
        build_datamodule(
            config_file, seq_length=-1, **{"task_encoder.options.image_tokns": 2}, packing={"name": "ffd"}
        )
    paths = {issue.path for issue in info.value.issues}
    assert {"seq_length", "task_encoder.options.image_tokns", "packing_buffer_size"} <= paths
    assert calls == []


def test_runtime_arguments_pass_through(config_file):
    dm = build_datamodule(config_file, validation_mode="infinite", pg_collection=None)
    assert dm.validation_mode == "infinite"


def test_energon_section_goes_to_get_train_dataset(config_file):
    dm = build_datamodule(config_file, energon={"virtual_epoch_length": 3})
    assert dm.kwargs == {"virtual_epoch_length": 3}
    it = iter(dm.train_dataloader())
    batches = [next(it) for _ in range(3)]
    assert all(b.input_ids.shape[1] <= 512 for b in batches)


def test_mapping_config_and_model_config(config_file):
    from energon_plugins.config import load_config

    config = load_config(config_file)
    dm = build_datamodule(config, micro_batch_size=2, global_batch_size=4, batch_format=None)
    assert dm.micro_batch_size == 2 and dm.global_batch_size == 4 and dm.batch_format is None
    assert isinstance(dm.multimodal_sample_config, MultiModalSampleConfig)
    batch = next(iter(dm.train_dataloader()))
    assert batch.input_ids.shape[0] == 2
    assert int(batch.labels[batch.labels != -7].numel()) > 0
    assert bool((batch.labels == -7).any())  # the configured ignore index is used (the
    # task encoder's own batch: batch_format null)


def test_unloadable_tokenizer_names_the_key(config_file, tmp_path):
    empty = tmp_path / "empty-tokenizer"
    empty.mkdir()
    from energon_plugins.errors import ConfigError

    with pytest.raises(ConfigError, match="tokenizer.path"):
        build_datamodule(config_file, tokenizer={"path": str(empty)})
