"""The datamodule's tar readers keep a bounded number of tar headers, and read the same batches.

Energon 7.4's open tar files keep every header they parse (``TarFile.members``), about 1.8 KB
of resident memory per sample read, for the whole run. The datamodule bounds them
(:mod:`energon_plugins.loading.tar_members`). These tests count the headers held (not the
resident set, which is noisy) in a datamodule loader and in a plain Energon loader over the
same dataset, and compare their batches. The long-run figures are in
``benchmarks/memory/soak.py``.
"""

import tarfile

import pytest
from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset
from megatron.energon.flavors.webdataset.itar import ITarFile

import energon_plugins
from energon_plugins.loading.tar_members import (
    KEPT_MEMBERS,
    BoundingFileCache,
    RecentMembers,
    bound_members,
    bound_tar_reader,
    bound_tar_readers,
    kept_headers,
    tar_readers,
)
from energon_plugins.testing import batch_differences

BATCH = 4
BATCHES = 150  # 600 samples: 1,200 tar entries read, 13 passes over the 45 training samples
PARTS = 2  # a VQA sample is a .png and a .json


def make_dm(info, tokenizer, processor):
    return energon_plugins.EnergonMultiModalDataModule(
        str(info.path),
        tokenizer,
        processor,
        seq_length=64,
        micro_batch_size=BATCH,
        num_workers=0,
        batch_format=None,  # the task encoder's batches, as the plain loader gives them
        task_encoder={"name": "multimodal", "options": {"image_tokens": 4}},
    )


def plain_energon_loader(dm):
    """A hand-wired Energon loader with the datamodule's dataset, encoder and arguments."""
    dataset = get_train_dataset(
        dm.path,
        split_part="train",
        batch_size=BATCH,
        task_encoder=dm.task_encoder,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        shuffle_buffer_size=dm.shuffle_buffer_size,
        max_samples_per_sequence=dm.max_samples_per_sequence,
    )
    return get_savable_loader(dataset)


def open_files(dataset):
    return sum(len(reader.itar_files_cache) for reader in tar_readers(dataset))


def test_the_datamodule_keeps_few_headers_and_reads_the_batches_energon_reads(
    vqa_dataset, tokenizer, small_clip_processor
):
    ours = make_dm(vqa_dataset, tokenizer, small_clip_processor).train_dataloader()
    ours_dataset = ours.dataloader.dataset
    theirs = plain_energon_loader(make_dm(vqa_dataset, tokenizer, small_clip_processor))
    ours_iter, theirs_iter = iter(ours), iter(theirs)
    held = []
    for half in range(2):
        for index in range(BATCHES // 2):
            got, want = next(ours_iter), next(theirs_iter)
            assert batch_differences(got, want) == [], f"batch {half * BATCHES // 2 + index}"
        held.append((kept_headers(ours_dataset), kept_headers(theirs.dataset)))
    samples = BATCHES * BATCH
    (ours_half, theirs_half), (ours_end, theirs_end) = held
    # Energon keeps one header per entry read (plus what its shuffle buffer read ahead) ...
    assert theirs_half >= PARTS * samples // 2
    assert theirs_end >= PARTS * samples
    assert theirs_end - theirs_half >= PARTS * samples // 2 - PARTS
    # ... the datamodule at most KEPT_MEMBERS per open tar file, and no more at the end.
    assert 0 < ours_end <= KEPT_MEMBERS * open_files(ours_dataset)
    assert ours_end == ours_half


def test_a_bounded_tar_file_keeps_the_last_headers_and_reads_every_entry(vqa_dataset):
    shard = next(vqa_dataset.path.glob("shard-*.tar"))
    with tarfile.open(shard) as plain:
        expected = [(m.name, plain.extractfile(m).read()) for m in plain.getmembers()]
    assert len(expected) > 3
    with open(shard, "rb") as fileobj, ITarFile.open(fileobj=fileobj, mode="r:") as tar_file:
        bound_members(tar_file, limit=3)
        read = []
        tar_file.offset = 0
        while (member := tar_file.next()) is not None:
            read.append((member.name, tar_file.extractfile(member).read()))
        assert read == expected
        assert [m.name for m in tar_file.members] == [name for name, _ in expected[-3:]]


def test_recent_members_keeps_the_last_appended():
    members = RecentMembers(range(5), limit=3)
    assert members == [2, 3, 4]
    members.append(5)
    assert members == [3, 4, 5]
    with pytest.raises(ValueError, match="limit"):
        RecentMembers(limit=0)


def test_the_file_cache_bounds_every_file_put_in(vqa_dataset):
    shard = next(vqa_dataset.path.glob("shard-*.tar"))
    with open(shard, "rb") as a, open(shard, "rb") as b, open(shard, "rb") as c:
        files = [ITarFile.open(fileobj=f, mode="r:") for f in (a, b, c)]
        cache = BoundingFileCache({0: files[0]}, kept_members=2)
        cache[1] = files[1]
        cache.setdefault(2, files[2])
        assert all(isinstance(f.members, RecentMembers) and f.members.limit == 2 for f in cache.values())
        for f in files:
            f.close()


def test_only_energon_tar_readers_are_bounded_and_only_once(vqa_dataset, tokenizer, small_clip_processor):
    dm = make_dm(vqa_dataset, tokenizer, small_clip_processor)
    dataset = dm.datasets_provider(WorkerConfig(rank=0, world_size=1, num_workers=0), split="train")
    readers = list(tar_readers(dataset))
    assert readers and not any(isinstance(r.itar_files_cache, BoundingFileCache) for r in readers)
    assert bound_tar_readers(dataset) == len(readers)
    caches = [r.itar_files_cache for r in readers]
    assert all(isinstance(c, BoundingFileCache) for c in caches)
    assert bound_tar_readers(dataset) == len(readers)  # idempotent: the same caches stay
    assert [r.itar_files_cache for r in readers] == caches
    assert all(a is b for a, b in zip((r.itar_files_cache for r in readers), caches, strict=True))
    assert bound_tar_reader(object()) is False
