"""The loader users can trust: pinning that the setting controls, device prefetch, exact resume
(0 and 2 workers, packing, a fresh process), fingerprinted checkpoints, and a validation loader
that reproduces with a split smaller than its workers.

Everything runs on real Energon datasets written by the tests and read through Energon's loader.
"""

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import energon_plugins
from energon_plugins.loading.checkpoint import StateMismatchError
from energon_plugins.synthetic import write_dataset
from energon_plugins.testing import batch_differences

SEQ = 128


def make_dm(info, tokenizer, processor, *, packing=False, **kwargs):
    args = dict(
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6}},
    )
    if packing:
        args.update(
            packing_buffer_size=6, packing=energon_plugins.create("packing_strategy", "first-fit-decreasing")
        )
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)


def assert_same(got, want):
    """Every key of the (default megatron-bridge) batches is identical: keys, tokens, labels,
    masks, position ids, visual inputs and, packed, the flat ``cu_seqlens_*`` keys."""
    assert got["__keys__"] and batch_differences(got, want) == []


def take(loader, n):
    return [next(loader) for _ in range(n)]


# ---------------------------------------------------------------------------- pinning
def test_energon_alone_warns_on_cpu_so_the_pinning_test_can_fail(vqa_dataset):
    """Control: Energon's loader hard-codes pin_memory=True; on CPU-only torch that warns."""
    if torch.cuda.is_available():
        pytest.skip("the warning only exists without CUDA")
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    dataset = get_val_dataset(
        str(vqa_dataset.path),
        split_part="val",
        batch_size=2,
        worker_config=WorkerConfig.default_worker_config(0),
    )
    loader = get_loader(dataset)
    assert loader.pin_memory is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="pin_memory"):
            next(iter(loader))


@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_pin_memory_setting_is_applied_and_quiet(vqa_dataset, tokenizer, clip_processor, pin, workers):
    dm = make_dm(
        vqa_dataset, tokenizer, clip_processor, pin_memory=pin, num_workers=workers, num_val_workers=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train = dm.train_dataloader()
        expected = pin and torch.cuda.is_available()
        assert train.dataloader.pin_memory is expected
        batches = take(train, 3)
        val = dm.val_dataloader()
        assert val.dataloader.pin_memory is expected
        list(val.one_pass())
    assert all(b["tokens"].is_pinned() is expected for b in batches)
    assert all(b["visual_inputs"].pixel_values.is_pinned() is expected for b in batches)


# ---------------------------------------------------------------------------- device
def test_device_prefetch_yields_the_same_stream(vqa_dataset, tokenizer, clip_processor):
    plain = take(make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader(), 5)
    # "cpu" exercises the one-ahead prefetch path on this machine; "cuda" without CUDA is a
    # quiet pass-through (no warning per batch).
    devices = ["cpu"] if torch.cuda.is_available() else ["cpu", "cuda"]
    for device in devices:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dm = make_dm(vqa_dataset, tokenizer, clip_processor, device=device)
            got = take(dm.train_dataloader(), 5)
        for a, b in zip(got, plain, strict=True):
            assert a["tokens"].device.type == "cpu"
            assert_same(a, b)


# ---------------------------------------------------------------------------- exact resume
@pytest.mark.parametrize("before", [0, 1, 4])
@pytest.mark.parametrize("packing", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("device", [None, "cpu"], ids=["host", "prefetch"])
def test_resume_continues_batch_for_batch(vqa_dataset, tokenizer, clip_processor, before, packing, device):
    after = 4
    reference = take(
        make_dm(vqa_dataset, tokenizer, clip_processor, packing=packing, device=device).train_dataloader(),
        before + after,
    )
    first = make_dm(vqa_dataset, tokenizer, clip_processor, packing=packing, device=device)
    loader = first.train_dataloader()
    for got, want in zip(take(loader, before), reference[:before], strict=True):
        assert_same(got, want)
    state = loader.save_state()
    # the saving loader continues undisturbed
    assert_same(next(loader), reference[before])

    second = make_dm(vqa_dataset, tokenizer, clip_processor, packing=packing, device=device)
    second.train_dataloader().restore_state(state)
    for got, want in zip(take(second.train_dataloader(), after), reference[before:], strict=True):
        assert_same(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("packing", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("device", [None, "cpu"], ids=["host", "prefetch"])
def test_resume_with_two_workers(vqa_dataset, tokenizer, clip_processor, packing, device):
    before, after = 5, 5
    reference = take(
        make_dm(
            vqa_dataset, tokenizer, clip_processor, packing=packing, num_workers=2, device=device
        ).train_dataloader(),
        before + after,
    )
    first = make_dm(vqa_dataset, tokenizer, clip_processor, packing=packing, num_workers=2, device=device)
    loader = first.train_dataloader()
    take(loader, before)
    state = loader.save_state()
    second = make_dm(vqa_dataset, tokenizer, clip_processor, packing=packing, num_workers=2, device=device)
    second.train_dataloader().restore_state(state)
    for got, want in zip(take(second.train_dataloader(), after), reference[before:], strict=True):
        assert_same(got, want)


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    import torch.utils.data._utils as data_utils
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1
    import transformers
    import energon_plugins
    from energon_plugins.synthetic import build_demo_tokenizer

    path, folder = sys.argv[1], sys.argv[2]
    workers, packing, n = int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5])
    args = dict(seq_length=%d, micro_batch_size=2, num_workers=workers, shuffle_buffer_size=10,
                task_encoder={"name": "multimodal", "options": {"image_tokens": 6}})
    if packing:
        args.update(packing_buffer_size=6,
                    packing=energon_plugins.create("packing_strategy", "first-fit-decreasing"))
    dm = energon_plugins.EnergonMultiModalDataModule(path, build_demo_tokenizer(), transformers.CLIPImageProcessor(), **args)
    dm.load_checkpoint(folder)
    loader = dm.train_dataloader()
    out = []
    for _ in range(n):
        b = next(loader)
        out.append([list(b["__keys__"]), int(b["tokens"].sum()), int(b["labels"].sum()),
                    round(float(b["visual_inputs"].pixel_values.double().sum()), 3)])
    print(json.dumps(out))
    """
    % SEQ
)


@pytest.mark.slow
@pytest.mark.parametrize("workers,packing", [(0, True), (2, True)])
def test_resume_in_a_fresh_process(vqa_dataset, tokenizer, clip_processor, tmp_path, workers, packing):
    import json

    before, after = 3, 4
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, packing=packing, num_workers=workers)
    loader = dm.train_dataloader()
    take(loader, before)
    path = dm.save_checkpoint(tmp_path / "ckpt")
    assert path.name == "train_dataloader_dprank000.pt"
    expected = [
        [
            list(b["__keys__"]),
            int(b["tokens"].sum()),
            int(b["labels"].sum()),
            round(float(b["visual_inputs"].pixel_values.double().sum()), 3),
        ]
        for b in take(loader, after)
    ]
    script = tmp_path / "resume.py"
    script.write_text(_FRESH_PROCESS)
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            str(vqa_dataset.path),
            str(tmp_path / "ckpt"),
            str(workers),
            "1" if packing else "0",
            str(after),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected


# ---------------------------------------------------------------------------- fingerprints
def test_a_checkpoint_of_another_setup_names_the_difference(
    vqa_dataset, captioning_dataset, tokenizer, clip_processor, tmp_path
):
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    take(dm.train_dataloader(), 2)
    dm.save_checkpoint(tmp_path)

    other_dataset = make_dm(captioning_dataset, tokenizer, clip_processor)
    with pytest.raises(StateMismatchError, match=r"dataset: saved 'uuid:"):
        other_dataset.load_checkpoint(tmp_path)

    other_encoder = make_dm(
        vqa_dataset,
        tokenizer,
        clip_processor,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6, "on_error": "raise"}},
    )
    with pytest.raises(StateMismatchError) as info:
        other_encoder.load_checkpoint(tmp_path)
    assert "task_encoder_options" in str(info.value) and "on_error" in str(info.value)
    assert "dataset:" not in str(info.value)

    other_batch = make_dm(vqa_dataset, tokenizer, clip_processor, micro_batch_size=3, num_workers=1)
    with pytest.raises(StateMismatchError) as info:
        other_batch.load_checkpoint(tmp_path)
    assert "micro_batch_size: saved 2, now 3" in str(info.value)
    assert "num_workers: saved 0, now 1" in str(info.value)

    same = make_dm(vqa_dataset, tokenizer, clip_processor)
    same.load_checkpoint(tmp_path)  # the same setup loads


def test_an_energon_state_alone_still_restores(vqa_dataset, tokenizer, clip_processor):
    """A bare Energon state (as older checkpoints hold) is accepted by restore_state."""
    reference = take(make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader(), 5)
    loader = make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader()
    take(loader, 2)
    bare = loader.save_state()["energon"]
    again = make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader()
    again.restore_state(bare)
    for got, want in zip(take(again, 3), reference[2:], strict=True):
        assert_same(got, want)


# ---------------------------------------------------------------------------- validation
@pytest.fixture(scope="module")
def tiny_val_dataset(tmp_path_factory):
    """Val split: one shard of 3 samples (fewer than workers); train: 4 shards."""
    info = write_dataset(
        tmp_path_factory.mktemp("tiny-val") / "d", kind="vqa", num_samples=23, samples_per_shard=5
    )
    assert len(info.split_keys["val"]) == 3
    return info


@pytest.mark.slow
def test_val_split_smaller_than_workers_is_complete_and_reproducible(
    tiny_val_dataset, tokenizer, clip_processor
):
    dm = make_dm(tiny_val_dataset, tokenizer, clip_processor, num_val_workers=4, micro_batch_size=2)
    passes = [[list(b["__keys__"]) for b in dm.val_dataloader().one_pass()] for _ in range(2)]
    keys = [k for batch in passes[0] for k in batch]
    assert sorted(keys) == sorted(tiny_val_dataset.split_keys["val"])
    assert passes[0] == passes[1]


@pytest.mark.slow
def test_infinite_validation_on_a_tiny_split_explains_itself(tiny_val_dataset, tokenizer, clip_processor):
    from energon_plugins.errors import DatasetError

    dm = make_dm(tiny_val_dataset, tokenizer, clip_processor, num_val_workers=4, validation_mode="infinite")
    loader = dm.val_dataloader()
    with pytest.raises(DatasetError, match=r"validation_mode='finite'.*") as info:
        for _ in range(8):  # the worker without samples fails on its turn
            next(loader)
    assert "4 worker(s) per rank" in str(info.value)


# ---------------------------------------------------------------------------- other setups
def carry_dm(info, tokenizer, processor, carry_over, **kwargs):
    packing = {"name": "first-fit-decreasing", "options": {"carry_over": carry_over}}
    args = dict(
        seq_length=SEQ,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 6}},
        packing_buffer_size=6,
        packing=packing,
    )
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)


def test_toggling_carry_over_is_named_on_every_restore_path(vqa_dataset, tokenizer, clip_processor, tmp_path):
    dm = carry_dm(vqa_dataset, tokenizer, clip_processor, carry_over=True)
    take(dm.train_dataloader(), 2)
    dm.save_checkpoint(tmp_path)
    saved = dm.state_dict()
    bare_dict = dm.train_dataloader().save_state()

    for restore in (
        lambda other: other.load_checkpoint(tmp_path),  # the fingerprinted file
        lambda other: other.load_state_dict(saved),  # state_dict()
        lambda other: other.train_dataloader().restore_state(bare_dict),  # Bridge's flow
    ):
        other = carry_dm(vqa_dataset, tokenizer, clip_processor, carry_over=False)
        with pytest.raises(StateMismatchError) as info:
            restore(other)
        message = str(info.value)
        assert "packing_options: saved" in message and "'carry_over': True" in message
        assert "\n" not in message
    same = carry_dm(vqa_dataset, tokenizer, clip_processor, carry_over=True)
    same.load_state_dict(saved)
    assert take(same.train_dataloader(), 1)


def test_a_bare_state_of_another_setup_is_explained(vqa_dataset, tokenizer, clip_processor):
    """Energon's bare state carries no fingerprint: what Energon would assert is named."""
    bare = make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader().save_state()["energon"]
    with pytest.raises(StateMismatchError, match=r"num_workers: saved 0, now 1"):
        make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=1).train_dataloader().restore_state(bare)
    with pytest.raises(StateMismatchError, match=r"micro_batch_size: saved 2, now 3"):
        make_dm(vqa_dataset, tokenizer, clip_processor, micro_batch_size=3).train_dataloader().restore_state(
            bare
        )
    with pytest.raises(StateMismatchError, match=r"not a loader state: .* got a dict with keys"):
        make_dm(vqa_dataset, tokenizer, clip_processor).train_dataloader().restore_state({"weights": 1})
    # the encoder's structure differs (carry-over packing stage): Energon's assertion is wrapped
    with pytest.raises(StateMismatchError, match=r"restoring the loader state failed.*setup"):
        other = carry_dm(vqa_dataset, tokenizer, clip_processor, carry_over=True).train_dataloader()
        other.restore_state(bare)
        next(other)


def test_checkpoint_files_hold_no_repr_of_the_config(vqa_dataset, tokenizer, clip_processor, tmp_path):
    from energon_plugins.loading.checkpoint import read_state_file

    dm = make_dm(vqa_dataset, tokenizer, clip_processor, subflavors={"note": "x" * 500})
    take(dm.train_dataloader(), 1)
    path = dm.save_checkpoint(tmp_path)
    _, fingerprint = read_state_file(path)
    assert fingerprint["energon_kwargs"]["subflavors"].startswith("sha256:")
    assert "x" * 100 not in str(fingerprint)


# ---------------------------------------------------------------------------- freeing
@pytest.mark.slow
def _own_children(before):
    """PIDs of live child processes started since ``before`` (a set of PIDs): children of
    earlier tests that exit meanwhile do not count (they failed this test in some orders)."""
    import multiprocessing

    return {p.pid for p in multiprocessing.active_children()} - before


def _own_children_settle(before, timeout=60.0):
    """How many of this test's children are alive once none is (or the timeout passes): a
    stopped worker takes a moment to exit, longer on a loaded machine."""
    import time

    deadline = time.monotonic() + timeout
    while _own_children(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(_own_children(before))


def test_discarded_loaders_stop_their_workers(vqa_dataset, tokenizer, clip_processor):
    import gc
    import multiprocessing

    before = {p.pid for p in multiprocessing.active_children()}
    dm = make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=2, num_val_workers=2)
    take(dm.train_dataloader(), 2)
    val = dm.val_dataloader()
    list(val.one_pass())
    it = iter(val)
    next(it)
    assert len(_own_children(before)) >= 4
    dm.close()  # explicit: workers stop now
    assert _own_children_settle(before) == 0
    assert dm.train_dataloader_object is None and dm.val_dataloader_object is None

    dm = make_dm(vqa_dataset, tokenizer, clip_processor, num_workers=0, num_val_workers=2)
    list(dm.val_dataloader().one_pass())
    assert len(_own_children(before)) == 2
    del dm, val, it
    gc.collect()  # dropped: the workers go with the loader
    assert _own_children_settle(before) == 0


# ---------------------------------------------------------------------------- discarded loaders
def test_a_discarded_loader_leaves_no_watchdog_thread_holding_its_chain(
    vqa_dataset, tokenizer, clip_processor
):
    """Energon 7.4's watchdog thread never ends and keeps the whole dataset chain (shuffle
    buffer included) alive; the datamodule's loaders end it with their iteration, so a
    rebuilt loader frees the last one."""
    import gc
    import threading
    import weakref

    from megatron.energon.wrappers.watchdog_dataset import WatchdogDataset

    def watchdog_stage(loader):
        stage = loader._dataloader.dataset
        while not isinstance(stage, WatchdogDataset):
            stage = stage.dataset
        return stage

    gc.collect()
    stages = []
    for _ in range(3):
        # Threads of earlier tests' loaders may end meanwhile: only this loader's are counted.
        before = set(threading.enumerate())
        dm = make_dm(vqa_dataset, tokenizer, clip_processor)
        loader = dm.train_dataloader()
        take(loader, 2)
        stages.append(weakref.ref(watchdog_stage(loader)))
        started = set(threading.enumerate()) - before
        assert len(started) == 1  # this loader's watchdog, running
        del dm, loader
        gc.collect()
        for thread in started:
            thread.join(timeout=5)
            assert not thread.is_alive()
    assert all(ref() is None for ref in stages)


# ---------------------------------------------------------------------------- garbage collector
def test_a_validation_pass_leaves_the_training_loaders_heap_frozen(vqa_dataset, tokenizer, clip_processor):
    """Energon's ``GcDataset`` freezes the garbage collector when an iteration starts and
    unfreezes it when one ends, for the whole process: at 0 workers a validation pass unfroze
    the heap under the training loader, whose collections every 10 batches then scanned every
    object of the process. In the main process only the training loader freezes now."""
    import gc

    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    train = dm.train_dataloader()
    take(train, 2)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    passes = 0
    for _ in dm.val_dataloader().one_pass():
        passes += 1
    assert passes > 0
    # Energon's own settings unfreeze everything here (count 0). Still frozen, the count may
    # shrink a little: frozen objects freed by reference counting leave the frozen set.
    assert gc.get_freeze_count() > frozen // 2
    take(train, 2)
    assert gc.get_freeze_count() > frozen // 2


def test_an_evaluation_only_pass_freezes_the_heap_and_gives_it_back(vqa_dataset, tokenizer, clip_processor):
    """With no training loader iterating (an evaluation-only script), a validation pass at 0
    workers freezes the heap for the pass, so Energon's collections every 10 batches skip all
    that was alive before it (without: each scans the whole process); the pass ends it."""
    import gc

    gc.unfreeze()
    gc.collect()  # loaders of earlier tests, gone
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    during = [gc.get_freeze_count() for _ in dm.val_dataloader().one_pass()]
    assert during and min(during) > 0
    assert gc.get_freeze_count() == 0


def test_a_training_loader_started_during_a_pass_keeps_its_freeze(vqa_dataset, tokenizer, clip_processor):
    """A pass that froze the heap (nothing else had) and ends after a training loader started
    leaves the heap frozen: the training loader's freeze covers the same objects."""
    import gc

    gc.unfreeze()
    gc.collect()
    dm = make_dm(vqa_dataset, tokenizer, clip_processor)
    val_pass = dm.val_dataloader().one_pass()
    next(val_pass)
    assert gc.get_freeze_count() > 0  # the pass's own freeze
    train = dm.train_dataloader()
    take(train, 2)
    frozen = gc.get_freeze_count()
    for _ in val_pass:
        pass
    assert gc.get_freeze_count() > frozen // 2
    take(train, 2)
    assert gc.get_freeze_count() > frozen // 2
