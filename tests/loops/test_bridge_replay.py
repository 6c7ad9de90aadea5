"""Megatron-Bridge's use of the datamodule, replayed on real Energon datasets.

What is replayed (Megatron-Bridge at its current head):

- ``EnergonDatasetBuilder.build`` (``src/megatron/bridge/data/builders/energon.py``): the
  constructor call with keywords only, no ``image_processor`` nor ``global_batch_size``, a task
  encoder object for training and validation, ``pg_collection`` from the build context (Bridge's
  own tests pass stand-ins whose groups answer ``rank()`` / ``size()``), ``**dataset_kwargs``;
  then ``datamodule.train_dataloader()`` and ``iter(datamodule.val_dataloader())``.
- Its evaluation: ``next()`` on that one iterator ``eval_iters`` times per evaluation, with no
  ``StopIteration`` handling.
- ``maybe_save_dataloader_state`` / ``maybe_load_dataloader_state``
  (``src/megatron/bridge/training/checkpointing.py``): ``torch.save({"dataloader_state_dict":
  iterable.save_state()})``, read back with ``energon_torch_load``
  (``src/megatron/bridge/utils/safe_pickle.py``), a restricted unpickler whose allowlist is
  builtins, NumPy arrays, torch tensors and Energon's state classes (rewritten below), then
  ``iterable.restore_state(loaded["dataloader_state_dict"])``.
"""

import io
import pickle
import types
import zipfile

import pytest
import torch

import energon_plugins
from energon_plugins import BuildContext, ConfigError
from energon_plugins.encoding.image_processors.hf import wrap_image_processor
from energon_plugins.loading.validation import is_padding_batch

SEQ = 128
FIELDS = ("input_ids", "labels", "loss_mask", "position_ids")


class Group:
    """A stand-in process group, as Megatron-Bridge's tests use: ``rank()`` and ``size()``."""

    def __init__(self, rank: int = 0, size: int = 1) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def pg_collection(dp=(0, 1), cp=(0, 1), tp=(0, 1)):
    return types.SimpleNamespace(dp=Group(*dp), cp=Group(*cp), tp=Group(*tp))


def bridge_task_encoder(tokenizer, processor, packing=None):
    """A task encoder *object*, as Bridge's ``build_energon_task_encoder`` returns one."""
    context = BuildContext(
        tokenizer=tokenizer,
        image_processor=wrap_image_processor(processor),
        seq_length=SEQ,
        packing=packing,
        packing_buffer_size=6 if packing else None,
    )
    return energon_plugins.create("task_encoder", "multimodal", {"image_tokens": 6}, context)


def bridge_build(
    path, tokenizer, task_encoder, *, pg=None, num_workers=0, packing_buffer_size=None, **dataset_kwargs
):
    """``EnergonDatasetBuilder.build``'s constructor call and loader calls, keyword for keyword."""
    datamodule = energon_plugins.EnergonMultiModalDataModule(
        path=str(path),
        tokenizer=tokenizer,
        seq_length=SEQ,
        task_encoder=task_encoder,
        validation_task_encoder=task_encoder,
        micro_batch_size=2,
        num_workers=num_workers,
        num_val_workers=0,
        pin_memory=True,
        shuffle_buffer_size=10,
        max_samples_per_sequence=None,
        packing_buffer_size=packing_buffer_size,
        pg_collection=pg if pg is not None else pg_collection(),
        **dataset_kwargs,
    )
    train = datamodule.train_dataloader()
    validation = iter(datamodule.val_dataloader())
    return datamodule, train, validation


def assert_same(got, want):
    """Two batches hold the same rows: ours as Bridge reads them (the default batch format),
    ``want`` either the same or Energon's plain pipeline's ``MultiModalBatch``."""
    if not isinstance(want, dict):
        want = energon_plugins.create("batch_format", "megatron-bridge")(want)
    assert list(got["__keys__"]) == list(want["__keys__"])
    for field in FIELDS:
        assert torch.equal(got[field], want[field]), field
    assert torch.equal(got["visual_inputs"].pixel_values, want["visual_inputs"].pixel_values)


# ------------------------------------------------------------------ Bridge's restricted loader
BRIDGE_ALLOWLIST = {
    "builtins": {
        "list",
        "dict",
        "tuple",
        "set",
        "frozenset",
        "bytes",
        "bytearray",
        "str",
        "int",
        "float",
        "bool",
        "complex",
        "slice",
        "range",
    },
    "collections": {"OrderedDict"},
    "numpy": {"ndarray", "dtype"},
    "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"},
    "torch._utils": {"_rebuild_tensor_v2", "_rebuild_tensor"},
    "megatron.energon.state": {"FlexState"},
    "megatron.energon.rng": {"SystemRngState"},
    "megatron.energon.savable_loader": {
        "SavableCheckpoint",
        "SavableDataLoaderState",
        "SavableDatasetCheckpoint",
        "SavableDatasetState",
    },
    "megatron.energon.flavors.webdataset.sample_loader": {"SliceState"},
}
STORAGES = {
    "UntypedStorage",
    "ByteStorage",
    "LongStorage",
    "IntStorage",
    "FloatStorage",
    "DoubleStorage",
    "BoolStorage",
    "HalfStorage",
    "BFloat16Storage",
    "ShortStorage",
    "CharStorage",
}


def bridge_energon_torch_load(path):
    """Bridge's ``energon_torch_load``: the torch zip read through an allowlist unpickler."""
    with zipfile.ZipFile(path) as zf:
        entry = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
        blobs = {
            n[len(entry) - len("data.pkl") + len("data/") :]: zf.read(n)
            for n in zf.namelist()
            if n.startswith(entry[: -len("data.pkl")] + "data/")
        }
        data = zf.read(entry)

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("_codecs", "encode"):
                return lambda text, encoding: str.encode(text, "latin1")
            if module in ("torch", "torch.storage") and name in STORAGES:
                return super().find_class(module, name)
            if name in BRIDGE_ALLOWLIST.get(module, ()):
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"Restricted unpickler refused to load '{module}.{name}'")

        def persistent_load(self, pid):
            _, storage_cls, key, _, _ = pid
            raw = torch.frombuffer(bytearray(blobs[key]), dtype=torch.uint8).untyped_storage()
            if storage_cls is torch.UntypedStorage:
                return raw
            return torch.storage.TypedStorage(wrap_storage=raw, dtype=storage_cls._dtype, _internal=True)

    return Unpickler(io.BytesIO(data)).load()


# ------------------------------------------------------------------ the builder call
def test_the_builders_call_builds_and_reads_through_rank_and_size(vqa_dataset, tokenizer, clip_processor):
    from megatron.energon.flavors.webdataset.structs import DatasetSubset

    encoder = bridge_task_encoder(tokenizer, clip_processor)
    subset = DatasetSubset(absolute_range=(0, 4))  # forwarded to training *and* validation
    dm, train, validation = bridge_build(vqa_dataset.path, tokenizer, encoder, subset=subset)
    assert dm.image_processor is None and dm.global_batch_size == 2
    assert dm.task_encoder is encoder and dm.validation_task_encoder is encoder
    train_keys = {k for _ in range(6) for k in next(train)["__keys__"]}
    assert len(train_keys) == 4 and train_keys <= set(vqa_dataset.split_keys["train"])
    val_keys = [k for _ in range(len(dm.val_dataloader())) for k in next(validation)["__keys__"]]
    assert sorted(val_keys) == sorted(vqa_dataset.split_keys["val"])[:4]


def test_stand_in_groups_give_rank_size_and_context_sizes(vqa_dataset, tokenizer, clip_processor):
    """Bridge's tests pass groups that only answer rank() / size(); nothing needs an
    initialised torch.distributed until ranks must agree on something."""
    encoder = bridge_task_encoder(tokenizer, clip_processor)
    pg = pg_collection(dp=(1, 2), cp=(0, 2), tp=(1, 4))
    dm, train, validation = bridge_build(vqa_dataset.path, tokenizer, encoder, pg=pg)
    config = dm._build_worker_config(0)
    assert (config.rank, config.world_size, config.data_parallel_group) == (1, 2, None)
    context = dm.build_context()
    assert (context.cp_size, context.tp_size, context.sequence_parallel) == (2, 4, None)
    assert dm.global_batch_size == 4, "micro batch x DP"
    assert set(next(train)["__keys__"]) <= set(vqa_dataset.split_keys["train"])
    with pytest.raises(ConfigError, match=r"len\(val_dataloader\(\)\).*2 ranks.*torch.distributed"):
        next(validation)  # two DP ranks must agree on the pass length: a clear error, no hang
    fixed = energon_plugins.EnergonMultiModalDataModule(
        path=str(vqa_dataset.path),
        tokenizer=tokenizer,
        task_encoder=encoder,
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=0,
        pg_collection=pg,
        val_batches_per_evaluation=2,
    )
    it = iter(fixed.val_dataloader())
    assert len(fixed.val_dataloader()) == 2 and next(it) is not None  # no agreement needed


def test_remote_paths_are_checked_when_the_datamodule_is_built(tokenizer, clip_processor):
    from energon_plugins import DatasetError

    encoder = bridge_task_encoder(tokenizer, clip_processor)
    with pytest.raises(
        DatasetError, match=r"msc://no-such-profile/datasets/vqa: .*profile 'no-such-profile'"
    ):
        energon_plugins.EnergonMultiModalDataModule(
            path="msc://no-such-profile/datasets/vqa",
            tokenizer=tokenizer,
            task_encoder=encoder,
            num_workers=0,
        )


# ------------------------------------------------------------------ the evaluation loop
def evaluate(validation, eval_iters):
    """Bridge's ``evaluate``: ``next()`` eval_iters times, no StopIteration handling."""
    return [next(validation) for _ in range(eval_iters)]


def test_every_evaluation_sees_the_same_batches(vqa_dataset, tokenizer, clip_processor):
    encoder = bridge_task_encoder(tokenizer, clip_processor)
    dm, _, validation = bridge_build(vqa_dataset.path, tokenizer, encoder)
    eval_iters = len(dm.val_dataloader())
    runs = [evaluate(validation, eval_iters) for _ in range(3)]
    keys = [[list(b["__keys__"]) for b in run] for run in runs]
    assert keys[0] == keys[1] == keys[2]
    for a, b in zip(runs[0], runs[2], strict=True):
        assert_same(a, b)
    flat = [k for batch in keys[0] for k in batch]
    assert sorted(flat) == sorted(vqa_dataset.split_keys["val"]), "every val sample once"


@pytest.mark.parametrize("extra", [-2, 2], ids=["fewer-than-a-pass", "more-than-a-pass"])
def test_val_batches_per_evaluation_restarts_every_evaluation(vqa_dataset, tokenizer, clip_processor, extra):
    encoder = bridge_task_encoder(tokenizer, clip_processor)
    full = [
        list(b["__keys__"])
        for b in bridge_build(vqa_dataset.path, tokenizer, encoder)[0].val_dataloader().one_pass()
    ]
    eval_iters = len(full) + extra
    # A Bridge user sets it in EnergonDatasetConfig.dataset_kwargs, which the builder passes on.
    dm, _, validation = bridge_build(
        vqa_dataset.path, tokenizer, encoder, val_batches_per_evaluation=eval_iters
    )
    assert len(dm.val_dataloader()) == eval_iters
    runs = [evaluate(validation, eval_iters) for _ in range(3)]
    for run in runs:
        real = [list(b["__keys__"]) for b in run if not is_padding_batch(b)]
        assert real == full[:eval_iters], "each evaluation starts the split again"
        for filler in run[len(real) :]:  # padding past the end: contributes nothing
            assert filler.loss_mask.sum() == 0 and bool((filler.labels == -100).all())
            assert filler.input_ids.shape == run[0].input_ids.shape
        assert len(run) - len(real) == max(extra, 0)


# ------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize(
    "packing, workers",
    [
        (None, 0),
        ({"carry_over": True}, 0),
        pytest.param(None, 2, marks=pytest.mark.slow),
        pytest.param({"carry_over": True}, 2, marks=pytest.mark.slow),
    ],
    ids=["plain-0w", "carry-0w", "plain-2w", "carry-2w"],
)
def test_state_round_trips_through_bridges_checkpointing(
    vqa_dataset, tokenizer, clip_processor, tmp_path, packing, workers
):
    def build():
        strategy = (
            None
            if packing is None
            else energon_plugins.create("packing_strategy", "first-fit-decreasing", packing)
        )
        encoder = bridge_task_encoder(tokenizer, clip_processor, packing=strategy)
        return bridge_build(
            vqa_dataset.path,
            tokenizer,
            encoder,
            num_workers=workers,
            packing_buffer_size=6 if packing else None,
        )

    _, train, _ = build()
    for _ in range(3):
        next(train)
    iterable = types.SimpleNamespace(iterable=train).iterable  # Bridge's RerunDataIterator
    path = tmp_path / "iter_0000003" / "train_dataloader_dprank000.pt"
    path.parent.mkdir()
    torch.save({"dataloader_state_dict": iterable.save_state()}, path)
    expected = [next(train) for _ in range(4)]

    loaded = bridge_energon_torch_load(path)  # refuses anything off the allowlist
    _, resumed, _ = build()
    resumed.restore_state(loaded["dataloader_state_dict"])
    for want in expected:
        assert_same(next(resumed), want)
    # our own reader takes Bridge's file as it is
    from energon_plugins.loading.checkpoint import read_state_file

    state, fingerprint = read_state_file(path)
    assert fingerprint is None and set(state) == {"energon", "skip_counts", "source_stats", "fingerprint"}


def test_a_plain_energon_state_restores_into_ours(vqa_dataset, tokenizer, clip_processor):
    """A state from Energon's own pipeline (Bridge's datamodule: get_train_dataset +
    get_savable_loader, no wrapper of ours) continues the same stream in our loader."""
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    encoder = bridge_task_encoder(tokenizer, clip_processor)
    plain = get_savable_loader(
        get_train_dataset(
            str(vqa_dataset.path),
            split_part="train",
            batch_size=2,
            task_encoder=encoder,
            worker_config=WorkerConfig.default_worker_config(0),
            packing_buffer_size=None,
            shuffle_buffer_size=10,
            max_samples_per_sequence=None,
        )
    )
    plain.pin_memory = False  # (CPU machine: no pinning warning)
    stream = iter(plain)
    for _ in range(3):
        next(stream)
    state = plain.save_state_rank()
    expected = [next(stream) for _ in range(4)]

    dm = energon_plugins.EnergonMultiModalDataModule(
        path=str(vqa_dataset.path),
        tokenizer=tokenizer,
        seq_length=SEQ,
        task_encoder=encoder,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
    )
    loader = dm.train_dataloader()
    loader.restore_state(state)
    for want in expected:
        assert_same(next(loader), want)
