"""One validation loss per dataset: Megatron-Bridge 0.6.2's own ``evaluate`` once per loader of
``dm.val_dataloaders()``, as ``docs/concepts.md`` ("One validation loss per dataset") shows.

On a real blend of three Energon datasets (VQA, captioning, interleaved), with Bridge's
``vlm_step.forward_step`` and masked next-token loss feeding :class:`TinyVLM`, run from a Bridge
callback's ``on_eval_end`` inside Bridge's own evaluation of the single validation loader:

- each dataset's ``lm loss`` equals the loss computed independently over that dataset's val
  split alone: a datamodule on the leaf by itself, its batches stepped through the replayed
  Bridge helpers of ``tests/_loop_replay.py`` (no Bridge code) into the same model;
- the datasets' loss-token counts add up to the single ``val_dataloader()``'s over one pass;
- a second evaluation gives the same losses (every evaluation restarts each dataset's split).
"""

import pytest
import torch
import yaml
from megatron.bridge.training.callbacks import CallbackManager
from megatron.bridge.training.eval import evaluate
from megatron.bridge.training.vlm_step import forward_step

from energon_plugins import EnergonMultiModalDataModule
from energon_plugins.loading.validation import is_padding_batch
from energon_plugins.synthetic import write_dataset
from tests._loop_replay import bridge_forward_args, bridge_get_batch, bridge_masked_next_token_loss
from tests_bridge.bridge_run import RecordingIterator, TinyVLM, bridge_config, global_state

WRITTEN = {"vqa": "vqa", "captioning": "./captioning", "interleaved": "interleaved/"}
"""Each leaf's ``path`` as the metadataset writes it: the source names."""


def evaluate_per_dataset(state, model, loaders, iterators):
    """The documented loop: Bridge's ``evaluate`` once per dataset, each for one pass of it."""
    eval_iters = state.cfg.validation.eval_iters
    losses = {}
    try:
        for source, iterator in iterators.items():
            state.cfg.validation.eval_iters = len(loaders[source])  # one pass of this dataset
            result, _, _ = evaluate(state, forward_step, iterator, model, None, state.cfg)
            losses[source] = result["lm loss"]
    finally:
        state.cfg.validation.eval_iters = eval_iters
    return losses


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    """``(metadataset, {source: dataset})``: three kinds blended in train and val."""
    root = tmp_path_factory.mktemp("per-dataset")
    sizes = {"vqa": 40, "captioning": 30, "interleaved": 20}
    datasets = {
        WRITTEN[kind]: write_dataset(root / kind, kind=kind, num_samples=n, samples_per_shard=5)
        for kind, n in sizes.items()
    }
    entries = "".join(f"      - weight: 1\n        path: {path}\n" for path in WRITTEN.values())
    path = root / "blend.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
        f"  train:\n    blend:\n{entries}  val:\n    blend:\n{entries}"
    )
    return path, datasets


def on_its_own(config_file, path, pg_collection):
    """The same config over ``path`` alone."""
    config = yaml.safe_load(config_file.read_text())
    alone = config_file.with_name(f"alone-{path.name}.yaml")
    alone.write_text(yaml.safe_dump({**config, "path": str(path)}))
    return EnergonMultiModalDataModule.from_config(alone, pg_collection=pg_collection)


def independent_loss(datamodule, model):
    """``(sum of masked per-token losses, loss tokens)`` over one pass of ``datamodule``'s
    validation batches, each stepped through the replayed Bridge helpers into ``model``."""
    total, tokens = torch.tensor(0.0), 0
    with torch.no_grad():
        for batch in datamodule.val_dataloader().one_pass():
            step = bridge_get_batch(iter([batch]))
            loss, count = bridge_masked_next_token_loss(step[2], model(**bridge_forward_args(step)))
            total, tokens = total + loss.cpu(), tokens + int(count)
    return total, tokens


def test_one_bridge_evaluation_per_dataset_gives_each_datasets_own_loss(run_config, pg_collection, blend):
    path, datasets = blend
    config_file = run_config(path=str(path))
    state = global_state(bridge_config(config_file, eval_iters=1))
    model = [TinyVLM(state.cfg.model, pg_collection)]
    dm = EnergonMultiModalDataModule.from_config(config_file, pg_collection=pg_collection)

    loaders = dm.val_dataloaders()  # on every DP rank
    assert list(loaders) == list(WRITTEN.values())
    iterators = {source: RecordingIterator(iter(loader)) for source, loader in loaders.items()}  # once
    losses = {}
    callbacks = CallbackManager()
    callbacks.register(
        "on_eval_end",
        lambda context: losses.update(evaluate_per_dataset(context.state, context.model, loaders, iterators)),
    )
    single = dm.val_dataloader()
    state.cfg.validation.eval_iters = len(single)
    evaluate(state, forward_step, iter(single), model, None, state.cfg, callback_manager=callbacks)
    assert list(losses) == list(WRITTEN.values())
    assert state.cfg.validation.eval_iters == len(single), "the config is left as it was"

    tokens = {}
    for source, recorder in iterators.items():
        read = [key for batch in recorder.batches if not is_padding_batch(batch) for key in batch["__keys__"]]
        assert sorted(read) == sorted(datasets[source].split_keys["val"]), f"{source}: its val split, once"
        assert {s for batch in recorder.batches for s in batch["__sources__"]} == {source}
        tokens[source] = sum(int(batch["loss_mask"].sum()) for batch in recorder.batches)

        alone = on_its_own(config_file, datasets[source].path, pg_collection)
        total, count = independent_loss(alone, model[0])
        alone.close()
        assert count == tokens[source] > 0, source
        assert torch.allclose(losses[source].cpu(), total / count, rtol=1e-5), (
            source,
            losses[source],
            total / count,
        )
    assert len({round(float(loss), 4) for loss in losses.values()}) == 3, "three datasets, three losses"

    single_tokens = sum(int(batch["loss_mask"].sum()) for batch in single.one_pass())
    assert sum(tokens.values()) == single_tokens, "the datasets' loss tokens add up to the single loader's"

    again = evaluate_per_dataset(state, model, loaders, iterators)
    for source, loss in losses.items():
        assert torch.equal(again[source], loss), f"{source}: every evaluation restarts its split"
    dm.close()
