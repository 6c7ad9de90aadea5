"""Per-source statistics as tracker scalars, written through torch's real TensorBoard writer.

A real run's ``stats()`` (a blend of two datasets) is flattened by ``stats_scalars`` and
written with ``torch.utils.tensorboard.SummaryWriter``; TensorBoard's own event reader reads
the event file back, and every scalar is there with its value and step.
"""

import pytest
import yaml

import energon_plugins
from energon_plugins import add_to_tensorboard, stats_scalars


def test_scalars_name_every_counter_skip_and_share():
    stats = {
        "msc://data/vqa": {"samples": 6, "tokens": 300, "packs": 0, "skipped": {"corrupt image": 2}},
        "captioning": {"samples": 2, "tokens": 100, "packs": 0, "skipped": {}},
    }
    scalars = stats_scalars(stats, prefix="train")
    assert scalars["train/msc_data_vqa/tokens"] == 300.0
    assert scalars["train/msc_data_vqa/skipped/corrupt_image"] == 2.0
    assert scalars["train/msc_data_vqa/token_share"] == pytest.approx(0.75)
    assert scalars["train/captioning/sample_share"] == pytest.approx(0.25)
    assert stats_scalars({}) == {}
    assert stats_scalars({"a": {"samples": 0, "tokens": 0}})["data/a/token_share"] == 0.0


def test_a_runs_stats_reach_tensorboard(tmp_path, vqa_dataset, captioning_dataset, tokenizer, clip_processor):
    pytest.importorskip(
        "tensorboard", reason="TensorBoard is the optional extra energon-plugins[tensorboard]"
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    blend = tmp_path / "blend.yaml"
    blend.write_text(
        yaml.safe_dump(
            {
                "__module__": "megatron.energon",
                "__class__": "MetadatasetV2",
                "splits": {
                    "train": {
                        "blend": [
                            {"weight": 1, "path": str(vqa_dataset.path)},
                            {"weight": 1, "path": str(captioning_dataset.path)},
                        ]
                    }
                },
            }
        )
    )
    module = energon_plugins.EnergonMultiModalDataModule(
        str(blend), tokenizer, clip_processor, seq_length=300, micro_batch_size=2, num_workers=0
    )
    loader = module.train_dataloader()
    iterator = iter(loader)
    logs = tmp_path / "tb"
    with SummaryWriter(str(logs)) as writer:
        for step in range(1, 4):
            next(iterator)
            written = add_to_tensorboard(writer, loader.stats(), step)
    assert written >= 2 * 10  # two sources, every counter and share
    events = EventAccumulator(str(logs))
    events.Reload()
    final = stats_scalars(loader.stats())
    assert set(events.Tags()["scalars"]) == set(final)
    for name, value in final.items():
        last = events.Scalars(name)[-1]
        assert last.step == 3 and last.value == pytest.approx(value)
    samples = [events.Scalars(name)[-1].value for name in final if name.endswith("/samples")]
    assert sum(samples) == 6  # three batches of two
