"""``EnergonMultiModalDataModule.val_dataloaders()``: one finite validation loader per source.

On a real blend of three Energon datasets (VQA, captioning, interleaved; the YAML writes each
leaf's path its own way): each source's loader reads exactly that leaf's val split, once per
pass, as a datamodule over the leaf alone does; every evaluation (Megatron-Bridge's: ``next()``
``len()`` times on one iterator) reads the same batches; every row's ``__sources__`` names the
source. Three gloo ranks: each loader has the same length on every rank and the ranks' real
rows cover the leaf's val split exactly once (``val_dataloaders_worker.py``).
"""

import json
from pathlib import Path

import pytest
import torch

import energon_plugins
from energon_plugins.errors import ConfigError
from energon_plugins.loading.per_source_validation import first_source_batch
from energon_plugins.loading.validation import is_padding_batch
from tests._ranks import run_worker

WORKER = Path(__file__).with_name("val_dataloaders_worker.py")
WRITTEN = {"vqa": "vqa", "captioning": "./captioning", "interleaved": "interleaved/"}
"""Each leaf's path as the metadataset YAML writes it (the source names)."""


def write_blend(path, written, val_extra=""):
    """A metadataset blending ``written`` (kind -> path as written) in train and val."""
    entries = "".join(f"      - weight: 1\n        path: {p}\n" for p in written.values())
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        f"  train:\n    blend:\n{entries}  val:\n    blend:\n{entries}{val_extra}"
    )
    return path


@pytest.fixture(scope="module")
def blend(data_root, vqa_dataset, captioning_dataset, interleaved_dataset):
    """The three-kind metadataset and each source's dataset (as written -> written dataset)."""
    path = write_blend(data_root / "val-per-source.yaml", WRITTEN)
    datasets = {"vqa": vqa_dataset, "captioning": captioning_dataset, "interleaved": interleaved_dataset}
    return path, {WRITTEN[kind]: datasets[kind] for kind in WRITTEN}


def make_dm(path, tokenizer, processor, **kwargs):
    args = dict(seq_length=256, micro_batch_size=2, num_workers=0, shuffle_buffer_size=10)
    args.update(kwargs)
    return energon_plugins.EnergonMultiModalDataModule(str(path), tokenizer, processor, **args)


def bridge_evaluate(validation, eval_iters):
    """Megatron-Bridge's ``evaluate``: ``next()`` eval_iters times, no StopIteration handling."""
    return [next(validation) for _ in range(eval_iters)]


def keys_of(batches):
    return [key for batch in batches if not is_padding_batch(batch) for key in batch["__keys__"]]


def test_one_loader_per_source_reads_its_val_split_once(blend, tokenizer, small_clip_processor):
    path, datasets = blend
    dm = make_dm(path, tokenizer, small_clip_processor)
    loaders = dm.val_dataloaders()
    assert list(loaders) == list(WRITTEN.values()), "named as written, in the order of the YAML"
    assert dm.val_dataloaders() is loaders, "built once"
    for source, loader in loaders.items():
        dataset = datasets[source]
        alone = make_dm(dataset.path, tokenizer, small_clip_processor)
        want = [list(b["__keys__"]) for b in alone.val_dataloader().one_pass()]
        alone.close()
        got = list(loader.one_pass())
        assert len(got) == len(loader) == len(want)
        assert [list(b["__keys__"]) for b in got] == want, source
        assert sorted(keys_of(got)) == sorted(dataset.split_keys["val"]), f"{source}: each val sample once"
        assert {s for b in got for s in b["__sources__"]} == {source}
    dm.close()
    assert dm.val_dataloaders_object is None


def test_every_evaluation_reads_the_same_batches_per_source(blend, tokenizer, small_clip_processor):
    """The documented per-source logging: Bridge's evaluation, once per source loader, twice."""
    path, _ = blend
    dm = make_dm(path, tokenizer, small_clip_processor)
    iterators = {source: iter(loader) for source, loader in dm.val_dataloaders().items()}
    runs = []
    for _ in range(2):
        losses = {}
        for source, validation in iterators.items():
            batches = bridge_evaluate(validation, len(dm.val_dataloaders()[source]))
            losses[source] = (batches, sum(float(b["loss_mask"].sum()) for b in batches))
        runs.append(losses)
    for source in WRITTEN.values():
        (first, loss_a), (second, loss_b) = runs[0][source], runs[1][source]
        assert loss_a == loss_b > 0
        for a, b in zip(first, second, strict=True):
            assert list(a["__keys__"]) == list(b["__keys__"])
            assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["loss_mask"], b["loss_mask"])
    dm.close()


def test_val_batches_per_evaluation_applies_to_each_source(blend, tokenizer, small_clip_processor):
    path, datasets = blend
    dm = make_dm(path, tokenizer, small_clip_processor, val_batches_per_evaluation=4)
    for source, loader in dm.val_dataloaders().items():
        batches = list(loader.one_pass())
        assert len(batches) == len(loader) == 4
        fillers = [b for b in batches if is_padding_batch(b)]
        for filler in fillers:  # made from this source's batch: its format and its source
            assert float(filler["loss_mask"].sum()) == 0 and filler["__sources__"] == [source] * 2
        real = -(-len(datasets[source].split_keys["val"]) // 2)
        assert len(fillers) == max(4 - real, 0), source
    dm.close()


def test_a_single_dataset_is_one_source_named_by_its_path(vqa_dataset, tokenizer, small_clip_processor):
    dm = make_dm(vqa_dataset.path, tokenizer, small_clip_processor)
    loaders = dm.val_dataloaders()
    assert list(loaders) == [str(vqa_dataset.path)]
    (loader,) = loaders.values()
    assert loader is not dm.val_dataloader(), "its own loader: iterating one never disturbs the other"
    batches = list(loader.one_pass())
    assert sorted(keys_of(batches)) == sorted(vqa_dataset.split_keys["val"])
    assert {s for b in batches for s in b["__sources__"]} == {str(vqa_dataset.path)}
    dm.close()


def test_a_rank_without_batches_pads_from_its_sources_first_batch(blend, tokenizer, small_clip_processor):
    """The template a rank with no batch of its own makes fillers from: the source's first
    batch read as a single rank, in the loader's format, naming the source."""
    path, _ = blend
    dm = make_dm(path, tokenizer, small_clip_processor)
    for index, (source, loader) in enumerate(dm.val_dataloaders().items()):
        template = first_source_batch(dm, index)
        first = next(iter(loader.one_pass()))
        assert type(template) is type(first) and template["__sources__"] == [source] * 2
        assert list(template["__keys__"]) == list(first["__keys__"])
        assert torch.equal(template["tokens"], first["tokens"])
    dm.close()


@pytest.mark.bad_input
def test_infinite_validation_mode_is_refused_by_name(vqa_dataset, tokenizer, small_clip_processor):
    dm = make_dm(vqa_dataset.path, tokenizer, small_clip_processor, validation_mode="infinite")
    with pytest.raises(ConfigError, match=r"validation_mode='infinite'.*validation_mode='finite'"):
        dm.val_dataloaders()


@pytest.mark.bad_input
def test_a_path_listed_twice_in_the_val_split_is_refused(
    data_root, vqa_dataset, tokenizer, small_clip_processor
):
    twice = "      - weight: 1\n        path: vqa\n        subflavors:\n          other: 1\n"
    path = write_blend(data_root / "val-twice.yaml", {"vqa": "vqa"}, val_extra=twice)
    dm = make_dm(path, tokenizer, small_clip_processor)
    with pytest.raises(ConfigError, match=r"val-twice\.yaml.*'vqa' more than once"):
        dm.val_dataloaders()


@pytest.mark.slow
def test_three_ranks_agree_per_source_and_cover_each_val_split_once(blend, tmp_path):
    path, datasets = blend
    out = tmp_path / "out"
    out.mkdir()
    proc = run_worker(WORKER, 3, tmp_path / "rendezvous", path, out, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-5000:]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    assert {r["dp_size"] for r in results} == {3}
    for source, dataset in datasets.items():
        per_rank = [r["sources"][source] for r in results]
        assert len({r["n"] for r in per_rank}) == 1, f"{source}: the same length on every rank"
        for r in per_rank:
            assert r["runs"][0] == r["runs"][1], f"{source}: the same batches every evaluation"
            assert set(r["sources"]) == {source}
        covered = [key for r in per_rank for key in r["runs"][0]]
        assert sorted(covered) == sorted(dataset.split_keys["val"]), f"{source}: exactly once over the ranks"
    assert [list(r["sources"]) for r in results] == [list(datasets)] * 3
    fillers = {s: sum(r["sources"][s]["fillers"] for r in results) for s in datasets}
    assert fillers["vqa"] == 0 and fillers["./captioning"] > 0, "15 = 5 x 3 is even, 10 is not"


def test_a_rank_without_validation_batches_pads_with_the_loops_format(vqa_dataset, tokenizer, clip_processor):
    """Rank 15 of 16 has none of the 15 val samples: its fillers are the same batch type and
    keys as rank 0's real batches (the megatron-bridge format), zero-loss, and name the source
    (they were raw encoder batches before)."""
    from tests._ranks import dp_collection

    def one_pass(rank):
        module = make_dm(
            vqa_dataset.path,
            tokenizer,
            clip_processor,
            seq_length=300,  # every val sample fits (at 256 the CLIP image's tokens leave no answer)
            val_batches_per_evaluation=2,
            pg_collection=dp_collection(rank, 16),
        )
        return list(module.val_dataloader().one_pass())

    real = [batch for batch in one_pass(0) if not is_padding_batch(batch)]  # its 1 sample
    fillers = one_pass(15)
    assert real
    assert len(fillers) == 2 and all(is_padding_batch(batch) for batch in fillers)
    for filler in fillers:
        assert type(filler) is type(real[0])
        assert sorted(filler.keys()) == sorted(real[0].keys())
        assert int(filler["loss_mask"].sum()) == 0
        assert filler["__sources__"] == [str(vqa_dataset.path)] * len(filler["__sources__"])
