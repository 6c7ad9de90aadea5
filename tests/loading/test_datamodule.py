"""``EnergonMultiModalDataModule`` and ``EnergonDataloader`` on real Energon datasets."""

import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

import energon_plugins
from energon_plugins import ConfigError, DatasetError, EnergonDataloader, cyclic_iter
from energon_plugins.errors import PluginNotFoundError, PluginOptionsError
from energon_plugins.loading.dataloader import LoaderStateError

SEQ = 300
IGNORE = -100


def make_dm(info, tokenizer, processor, **kwargs):
    args = dict(seq_length=SEQ, micro_batch_size=2, num_workers=0, shuffle_buffer_size=20)
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)


def batch_tensors(batch):
    """What Megatron-Bridge's vlm_step reads from the default (megatron-bridge) batch."""
    return (batch["tokens"], batch["labels"], batch["loss_mask"], batch["visual_inputs"].pixel_values)


def same_batches(a, b):
    assert a["__keys__"] == b["__keys__"]
    for x, y in zip(batch_tensors(a), batch_tensors(b), strict=True):
        assert torch.equal(x, y)


def val_keys(dm):
    keys = []
    for batch in dm.val_dataloader().one_pass():
        keys.extend(batch["__keys__"])
    return keys


# ---------------------------------------------------------------- shapes, labels, masks
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_train_and_val_batches(vqa_dataset, tokenizer, clip_processor, workers):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=workers)
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    train = dm.train_dataloader()
    assert dm.train_dataloader() is train, "built once"
    seen = set()
    for _ in range(6):
        batch = next(train)
        assert batch["tokens"].shape == (2, SEQ)
        assert batch["visual_inputs"].pixel_values.shape == (2, 3, 224, 224)
        assert set(batch["__keys__"]) <= set(vqa_dataset.split_keys["train"])
        for row, key in enumerate(batch["__keys__"]):
            labels = batch["labels"][row]
            text = tokenizer.decode(labels[labels != IGNORE], skip_special_tokens=True)
            assert text.strip() == vqa_dataset.samples[key]["answers"][0]
            assert int((batch["tokens"][row] == image_id).sum()) == 256
            on = labels != IGNORE  # next-token labels: position i predicts token i + 1
            assert torch.equal(labels[:-1][on[:-1]], batch["tokens"][row, 1:][on[:-1]])
        seen.update(batch["__keys__"])
    assert len(seen) > 2
    for batch in dm.val_dataloader().one_pass():
        assert set(batch["__keys__"]) <= set(vqa_dataset.split_keys["val"])
        assert batch["tokens"].shape[1] == SEQ
        assert torch.equal(batch["loss_mask"].bool(), batch["labels"] != IGNORE)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_val_is_finite_complete_and_reproducible(vqa_dataset, tokenizer, clip_processor, workers):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=workers, micro_batch_size=5)
    first = val_keys(dm)
    second = val_keys(dm)
    assert sorted(first) == sorted(vqa_dataset.split_keys["val"])
    assert len(first) == len(set(first)), "every val sample exactly once"
    assert first == second, "same order on every pass"
    # next()-driven evaluation (Megatron's eval_iters): len() batches, then the same pass again,
    # with no StopIteration in between (Megatron's loops do not handle one)
    loader = dm.val_dataloader()
    assert dm.val_dataloader() is loader, "built once"
    batches = [batch["__keys__"] for batch in loader.one_pass()]
    n = len(loader)
    assert n == len(batches) and n >= -(-len(first) // 5)
    it = iter(loader)
    for _ in range(3):  # three evaluations see the same batches in the same order
        pulled = [next(it)["__keys__"] for _ in range(n)]
        assert pulled == batches
    assert next(it)["__keys__"] == batches[0]


def test_infinite_validation_mode_cycles(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, validation_mode="infinite")
    loader = dm.val_dataloader()
    assert isinstance(loader, EnergonDataloader) and dm.val_dataloader() is loader
    n_val = len(vqa_dataset.split_keys["val"])
    keys = [k for _ in range(n_val) for k in next(loader)["__keys__"]]
    assert len(keys) == 2 * n_val, "keeps going past the end of the split"
    assert set(keys) <= set(vqa_dataset.split_keys["val"])
    assert len(set(keys)) < len(keys), "samples repeat"


def test_metadataset_blend(data_root, tokenizer, clip_processor):
    from energon_plugins.synthetic import write_demo_datasets

    info = write_demo_datasets(data_root / "demo", num_samples=40)
    dm = make_dm(info, tokenizer, clip_processor, micro_batch_size=4)
    keys = [k for _ in range(8) for k in next(dm.train_dataloader())["__keys__"]]
    kinds = {info.samples[k].get("kind") or k.split("-")[0] for k in keys}
    assert len(kinds) == 2, f"both datasets of the blend appear, got {kinds}"
    assert set(val_keys(dm)) == set(info.split_keys["val"])


# ---------------------------------------------------------------- save and restore
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_restore_in_a_fresh_datamodule_continues_exactly(vqa_dataset, tokenizer, clip_processor, workers):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=workers)
    loader = dm.train_dataloader()
    for _ in range(5):
        next(loader)
    state = pickle.loads(pickle.dumps(loader.save_state()))
    expected = [next(loader) for _ in range(6)]
    del loader, dm

    fresh = make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=workers)
    resumed = fresh.train_dataloader()
    resumed.restore_state(state)
    for want in expected:
        same_batches(next(resumed), want)


def test_restoring_leaves_the_state_unchanged_so_it_restores_again(vqa_dataset, tokenizer, clip_processor):
    """Energon adopts the state objects it restores from (its buffers consume them); the
    loader hands it a copy, so one in-memory state restores any number of loaders alike."""
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    loader = dm.train_dataloader()
    for _ in range(5):
        next(loader)
    state = loader.save_state()
    before = pickle.dumps(state)
    expected = [next(loader) for _ in range(3)]
    del loader, dm
    for _ in range(2):
        resumed = make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader()
        resumed.restore_state(state)
        for want in expected:
            same_batches(next(resumed), want)
        assert pickle.dumps(state) == before


def test_restore_after_iteration_started_is_refused(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    loader = dm.train_dataloader()
    state = loader.save_state()
    next(loader)
    with pytest.raises(LoaderStateError, match="before iteration starts"):
        loader.restore_state(state)
    with pytest.raises(LoaderStateError, match="not savable"):
        EnergonDataloader(dm.val_dataloader()).save_state()


# ---------------------------------------------------------------- worker config
_WORKER_CONFIG_SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("ignore")
    import torch.distributed as dist
    from megatron.core.process_groups_config import ProcessGroupCollection
    from energon_plugins.loading.datamodule import EnergonMultiModalDataModule

    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    dp = dist.new_group([0])
    dp_cp = dist.new_group([0])
    pgc = ProcessGroupCollection(dp=dp, dp_cp=dp_cp)
    dm = EnergonMultiModalDataModule(sys.argv[2], None, None, num_workers=3, pg_collection=pgc)
    wc = dm._build_worker_config(3, split="train")
    assert (wc.rank, wc.world_size, wc.num_workers) == (0, 1, 3), wc
    assert wc.data_parallel_group is dp and wc.data_parallel_group is not dp_cp
    val = dm._build_worker_config(1, split="val")
    assert val.num_workers == 1 and val.data_parallel_group is dp
    # without a dp group: Energon's default config (rank from torch.distributed)
    plain = EnergonMultiModalDataModule(sys.argv[2], None, None, pg_collection=None)
    wc2 = plain._build_worker_config(2)
    assert (wc2.rank, wc2.world_size, wc2.data_parallel_group) == (0, 1, None), wc2
    dist.destroy_process_group()
    print("OK")
    """
)


@pytest.mark.slow  # a subprocess with a gloo process group and megatron-core (~6 s)
def test_worker_config_uses_the_pure_dp_group(vqa_dataset, tmp_path):
    script = tmp_path / "wc.py"
    script.write_text(_WORKER_CONFIG_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "rendezvous"), str(vqa_dataset.path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_worker_config_without_distributed(vqa_dataset):
    dm = energon_plugins.EnergonMultiModalDataModule(str(vqa_dataset.path), None, None)
    wc = dm._build_worker_config(4)
    assert (wc.rank, wc.world_size, wc.num_workers) == (0, 1, 4)


# ---------------------------------------------------------------- bad input
def test_not_a_dataset(tmp_path, tokenizer, clip_processor):
    with pytest.raises(DatasetError, match="does not exist"):
        energon_plugins.EnergonMultiModalDataModule(str(tmp_path / "missing"), tokenizer, clip_processor)
    with pytest.raises(DatasetError, match="no .nv-meta/dataset.yaml"):
        energon_plugins.EnergonMultiModalDataModule(str(tmp_path), tokenizer, clip_processor)
    (tmp_path / "a.tar").write_bytes(b"")
    with pytest.raises(DatasetError, match="energon prepare"):
        energon_plugins.EnergonMultiModalDataModule(str(tmp_path), tokenizer, clip_processor)
    bad_yaml = tmp_path / "mds.yaml"
    bad_yaml.write_text("just: a mapping\n")
    with pytest.raises(DatasetError, match="not an Energon metadataset"):
        energon_plugins.EnergonMultiModalDataModule(str(bad_yaml), tokenizer, clip_processor)


def test_missing_split_is_named(train_only_dataset, tokenizer, clip_processor):
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(train_only_dataset.path), tokenizer, clip_processor, num_workers=0
    )
    with pytest.raises(DatasetError, match="no 'val' split") as info:
        dm.val_dataloader()
    assert "train" in str(info.value)
    with pytest.raises(ValueError, match="'train' or 'val'"):
        dm.datasets_provider(dm._build_worker_config(0), split="test")


def test_unknown_encoder_and_bad_options_fail_in_the_constructor(vqa_dataset, tokenizer, clip_processor):
    with pytest.raises(PluginNotFoundError, match="multimodl"):
        make_dm(vqa_dataset, tokenizer, clip_processor, task_encoder="multimodl")
    with pytest.raises(PluginOptionsError, match="image_tokens"):
        make_dm(
            vqa_dataset,
            tokenizer,
            clip_processor,
            task_encoder={"name": "multimodal", "options": {"image_tokens": "lots"}},
        )
    with pytest.raises(PluginNotFoundError):
        make_dm(vqa_dataset, tokenizer, clip_processor, validation_task_encoder="nope")
    with pytest.raises(ConfigError, match="name, options"):
        make_dm(vqa_dataset, tokenizer, clip_processor, task_encoder={"nam": "multimodal"})


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("num_workers", -1, "num_workers: Input should be greater than or equal to 0"),
        ("micro_batch_size", 0, "micro_batch_size: Input should be greater than or equal to 1"),
        ("seq_length", "long", "seq_length: must be an integer, got 'long'"),
        ("validation_mode", "sometimes", "validation_mode: must be 'finite' or 'infinite'"),
        ("multimodal_sample_config", 3, "multimodal_sample_config: must be a"),
    ],
)
def test_bad_arguments_are_named(vqa_dataset, tokenizer, clip_processor, field, value, words):
    with pytest.raises(ConfigError, match=words):
        make_dm(vqa_dataset, tokenizer, clip_processor, **{field: value})


def test_test_dataloader_warns_and_returns_none(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    with pytest.warns(UserWarning, match="no test split"):
        assert dm.test_dataloader() is None


def test_constructor_is_light_and_encoders_see_final_values(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    assert dm.train_dataloader_object is None and dm._task_encoder is None
    dm.seq_length = 333  # an override applied after construction
    assert dm.task_encoder.seq_length == 333
    assert dm.validation_task_encoder.context.split == "val"
    assert dm.task_encoder.context.split == "train"
    assert next(dm.train_dataloader())["tokens"].shape == (2, 333)
    with pytest.raises(PluginNotFoundError):
        dm.task_encoder = "no-such-encoder"
    dm.task_encoder = {"name": "multimodal", "options": {"image_tokens": 3}}
    assert dm.task_encoder.options.image_tokens == 3
    assert dm.pin_memory is True and dm.num_val_workers == dm.num_workers


def test_sample_config_mapping_and_encoder_object(vqa_dataset, tokenizer, clip_processor):
    dm = make_dm(
        vqa_dataset,
        tokenizer,
        clip_processor,
        multimodal_sample_config={"ignore_index": -1},
        batch_format=None,
    )  # the task encoder's own batch
    batch = next(dm.train_dataloader())
    assert int((batch.labels == -1).sum()) > 0 and int((batch.labels == IGNORE).sum()) == 0
    # the loops' formats read the sample config's ignore index and write -100
    dm_bridge = make_dm(vqa_dataset, tokenizer, clip_processor, multimodal_sample_config={"ignore_index": -1})
    labels = next(dm_bridge.train_dataloader())["labels"]
    assert int((labels == -1).sum()) == 0 and int((labels == IGNORE).sum()) > 0
    encoder = dm.task_encoder
    dm2 = make_dm(vqa_dataset, tokenizer, clip_processor, task_encoder=encoder)
    assert dm2.task_encoder is encoder and dm2.validation_task_encoder is encoder


def test_packing_buffer_without_a_packing_encoder_is_named(vqa_dataset, tokenizer, clip_processor):
    from megatron.energon import DefaultTaskEncoder

    dm = make_dm(
        vqa_dataset, tokenizer, clip_processor, packing_buffer_size=8, task_encoder=DefaultTaskEncoder()
    )
    with pytest.raises(ConfigError, match="packing_buffer_size=8 .*select_samples_to_pack"):
        dm.train_dataloader()
    assert dm.train_dataloader_object is None


def test_bad_sample_config_mapping_names_the_field(vqa_dataset, tokenizer, clip_processor):
    with pytest.raises(ConfigError, match="multimodal_sample_config: ignore_index"):
        make_dm(vqa_dataset, tokenizer, clip_processor, multimodal_sample_config={"ignore_index": "x"})


def test_a_split_where_every_sample_is_skipped_fails_instead_of_spinning(
    vqa_dataset, tokenizer, clip_processor
):
    from megatron.energon.errors import FatalSampleError

    dm = make_dm(
        vqa_dataset,
        tokenizer,
        clip_processor,
        seq_length=64,
        task_encoder={"name": "multimodal", "options": {"truncation": "drop"}},
    )
    with pytest.raises(FatalSampleError, match="too_long"):
        next(dm.train_dataloader())
    assert dm.task_encoder.error_counts() == {"too_long": 100}


# ---------------------------------------------------------------- cyclic_iter
def test_cyclic_iter_cycles_and_refuses_empty():
    it = cyclic_iter([1, 2, 3])
    assert [next(it) for _ in range(7)] == [1, 2, 3, 1, 2, 3, 1]
    with pytest.raises(ValueError, match="empty"):
        next(cyclic_iter([]))
    wrapped = EnergonDataloader([10, 20])
    assert iter(wrapped) is wrapped
    assert [next(wrapped) for _ in range(3)] == [10, 20, 10]
