"""Local reads without MSC's unrecorded metrics: same samples, metrics kept where configured."""

import pytest

from energon_plugins.loading import storage


@pytest.fixture
def restored():
    """Leave MSC as it was found after each test."""
    was = storage.local_metrics_skipped()
    yield
    if was:
        storage.skip_unrecorded_local_metrics()
    else:
        storage.restore_local_metrics()


def _keys_and_answers(path, n):
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(path, split_part="train", batch_size=1, worker_config=wc)
    out = []
    for i, batch in enumerate(get_loader(ds)):
        if i == n:
            break
        out.append((batch.__key__[0], batch.answers[0], float(batch.image[0].sum())))
    return out


def test_skip_reads_the_same_samples_and_counts_no_metric_calls(vqa_dataset, restored, monkeypatch):
    from multistorageclient.providers.base import BaseStorageProvider

    storage.restore_local_metrics()
    calls = []
    original = BaseStorageProvider._record_metrics
    monkeypatch.setattr(
        BaseStorageProvider,
        "_record_metrics",
        lambda self, *a, **k: (calls.append(1), original(self, *a, **k))[1],
    )
    plain = _keys_and_answers(str(vqa_dataset.path), 20)
    with_msc_metrics = len(calls)
    assert with_msc_metrics > 0  # MSC's bookkeeping runs on every local read by default

    assert storage.skip_unrecorded_local_metrics() is True
    assert storage.local_metrics_skipped()
    calls.clear()
    skipped = _keys_and_answers(str(vqa_dataset.path), 20)
    assert skipped == plain
    assert len(calls) == 0

    storage.restore_local_metrics()
    assert not storage.local_metrics_skipped()
    calls.clear()
    _keys_and_answers(str(vqa_dataset.path), 20)
    assert len(calls) > 0


def test_configured_instruments_keep_msc_path(restored):
    import multistorageclient as msc
    from multistorageclient.providers.base import BaseStorageProvider

    storage.skip_unrecorded_local_metrics()
    client, _ = msc.resolve_storage_client("/")
    provider = client._storage_provider
    provider._init_metrics()
    recorded = []
    provider._metric_gauges = {"latency": object()}  # as if an MSC config set up metrics
    provider._record_metrics = lambda *a, **k: recorded.append(a)
    try:
        read = BaseStorageProvider._Operation.READ
        assert provider._emit_metrics(operation=read, f=lambda: b"x") == b"x"
    finally:
        provider._metric_gauges = {}
        del provider._record_metrics
    assert len(recorded) == 1


def test_environment_variable_leaves_msc_alone(restored, monkeypatch):
    storage.restore_local_metrics()
    monkeypatch.setenv(storage.ENV_KEEP, "1")
    assert storage.skip_unrecorded_local_metrics() is False
    assert not storage.local_metrics_skipped()
