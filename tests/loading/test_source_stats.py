"""Counters per source (``EnergonDataloader.stats()``) and ``__sources__``, on a real blend of
four Energon datasets of different sample types, recomputed from the batches themselves."""

import collections

import pytest
import torch

import energon_plugins
from energon_plugins.synthetic import write_dataset

KINDS = ("vqa", "captioning", "interleaved", "chatml")
N_BATCHES = 8
SPLIT_AT = 3


@pytest.fixture(scope="module")
def blend(data_root, vqa_dataset, captioning_dataset, interleaved_dataset):
    """A metadataset blending four kinds; the YAML writes each leaf's path its own way."""
    write_dataset(data_root / "chatml", kind="chatml", num_samples=40, samples_per_shard=5)
    written = {"vqa": "vqa", "captioning": "./captioning", "interleaved": "interleaved/", "chatml": "chatml"}
    entries = "".join(f"      - weight: 1\n        path: {path}\n" for path in written.values())
    path = data_root / "four-kinds.yaml"
    path.write_text(
        f"__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n{entries}"
    )
    return path, written


def make_dm(path, tokenizer, processor, workers, packing):
    extra = {"packing_buffer_size": 8, "packing": {"name": "first-fit-decreasing"}} if packing else {}
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tokenizer,
        processor,
        seq_length=256,
        micro_batch_size=2,
        num_workers=workers,
        shuffle_buffer_size=10,
        **extra,
    )


def recount(batches, written):
    """Samples, packs, tokens, loss tokens and padding per source, from the Bridge batches."""
    out = collections.defaultdict(collections.Counter)
    for batch in batches:
        rows = [str(row).split(",") for row in batch["__keys__"]]
        assert batch["__sources__"] == [",".join(written[k.split("-")[0]] for k in row) for row in rows]
        packed = "cu_seqlens_q" in batch
        if packed:
            width = int(batch["total_tokens"]) // len(rows)
            cu = batch["cu_seqlens_q"].tolist()
            segments = [b - a for a, b in zip(cu, cu[1:], strict=False)]
        for r, row in enumerate(rows):
            sources = [written[key.split("-")[0]] for key in row]
            if not packed:
                real = int(batch["attention_mask"][r].sum())
                out[sources[0]].update(samples=1, tokens=real, padding=batch["tokens"].shape[1] - real)
                continue
            used = 0
            for source in sources:
                length = segments.pop(0)
                out[source].update(samples=1, tokens=length)
                used += length
            if used < width:
                segments.pop(0)  # the row's padding tail
            out[sources[0]]["padding"] += width - used
            for source in dict.fromkeys(sources):
                out[source]["packs"] += 1
    return out


@pytest.mark.parametrize(
    "workers", [0, pytest.param(2, marks=pytest.mark.slow)], ids=["0-workers", "2-workers"]
)
@pytest.mark.parametrize("packing", [False, True], ids=["unpacked", "packed"])
def test_stats_equal_the_batches_and_survive_restore(
    blend, tokenizer, small_clip_processor, workers, packing
):
    path, written = blend
    loader = make_dm(path, tokenizer, small_clip_processor, workers, packing).train_dataloader()
    assert loader.stats() == {}
    batches = [next(loader) for _ in range(N_BATCHES)]
    stats = loader.stats()
    expected = recount(batches, written)
    assert set(stats) == set(expected) == set(written.values()), "all four kinds, named as written"
    for source, counts in expected.items():
        got = stats[source]
        for name in ("samples", "tokens", "padding", "packs"):
            assert got[name] == counts[name], (source, name, got, dict(counts))
        assert 0 < got["loss_tokens"] <= got["tokens"]
        assert got["image_tokens"] > 0 and got["video_tokens"] == got["audio_tokens"] == 0
        assert got["skipped"] == {}
    loader.close()

    first = make_dm(path, tokenizer, small_clip_processor, workers, packing).train_dataloader()
    for _ in range(SPLIT_AT):
        next(first)
    state = first.save_state()
    first.close()
    assert sum(c["samples"] for c in recount(batches[:SPLIT_AT], written).values()) == sum(
        c["samples"] for c in sum_of(state["source_stats"]).values()
    )
    resumed = make_dm(path, tokenizer, small_clip_processor, workers, packing).train_dataloader()
    resumed.restore_state(state)
    assert resumed.stats() == energon_plugins_stats_at(state)
    rest = [next(resumed) for _ in range(N_BATCHES - SPLIT_AT)]
    assert [b["__keys__"] for b in rest] == [b["__keys__"] for b in batches[SPLIT_AT:]]
    assert resumed.stats() == stats, "the counters survive save / restore exactly"
    resumed.close()


def sum_of(per_worker):
    from energon_plugins.loading.source_stats import sum_stats

    return sum_stats(per_worker.values())


def energon_plugins_stats_at(state):
    """What ``stats()`` says right after restoring ``state`` (the per-worker counts summed)."""
    return sum_of(state["source_stats"])


def test_a_single_dataset_is_named_by_the_path_as_given(
    vqa_dataset, tokenizer, small_clip_processor, monkeypatch
):
    monkeypatch.chdir(vqa_dataset.path.parent)
    given = vqa_dataset.path.name  # relative, as a user may write it
    dm = energon_plugins.EnergonMultiModalDataModule(
        given,
        tokenizer,
        small_clip_processor,
        seq_length=256,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        batch_format="megatron-lm",
    )
    loader = dm.train_dataloader()
    batch = next(loader)
    assert batch["__sources__"] == [given, given]
    stats = loader.stats()
    assert list(stats) == [given] and stats[given]["samples"] == 2
    assert int(stats[given]["tokens"]) + stats[given]["padding"] == 2 * 256
    assert torch.is_tensor(batch["tokens"])
    loader.close()


def test_an_old_state_without_source_stats_restores(blend, tokenizer, small_clip_processor):
    path, _ = blend
    first = make_dm(path, tokenizer, small_clip_processor, 0, False).train_dataloader()
    next(first)
    state = first.save_state()
    del state["source_stats"]
    resumed = make_dm(path, tokenizer, small_clip_processor, 0, False).train_dataloader()
    resumed.restore_state(state)
    assert resumed.stats() == {}
    next(resumed)
    assert sum(c["samples"] for c in resumed.stats().values()) == 4, "the worker's own counters were saved"
