"""Shared fixtures: real Energon datasets written once per session, and an offline tokenizer."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# A suite run inside a Slurm array job must not turn every `convert` into a part of it.
for _name in [n for n in os.environ if n.startswith("SLURM_ARRAY_")]:
    del os.environ[_name]

import pytest


def _lower_worker_status_interval() -> None:
    """Make deleting a loader with workers take ~0.1 s instead of ~5 s (as Energon's tests do)."""
    try:
        import torch.utils.data._utils as data_utils
    except Exception:  # pragma: no cover - torch always present in the dev venv
        return
    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1


_lower_worker_status_interval()


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    """A session-wide folder for generated datasets."""
    return tmp_path_factory.mktemp("energon-data")


@pytest.fixture(scope="session")
def vqa_dataset(data_root):
    """A prepared VQA dataset: 60 samples, 5 per shard, 80/20 train/val by shard (45 / 15)."""
    from energon_plugins.synthetic import write_dataset

    return write_dataset(data_root / "vqa", kind="vqa", num_samples=60, samples_per_shard=5)


@pytest.fixture(scope="session")
def captioning_dataset(data_root):
    """A prepared captioning dataset: 40 samples, 5 per shard."""
    from energon_plugins.synthetic import write_dataset

    return write_dataset(data_root / "captioning", kind="captioning", num_samples=40, samples_per_shard=5)


@pytest.fixture(scope="session")
def interleaved_dataset(data_root):
    """A prepared interleaved dataset: 20 samples, 5 per shard."""
    from energon_plugins.synthetic import write_dataset

    return write_dataset(data_root / "interleaved", kind="interleaved", num_samples=20, samples_per_shard=5)


@pytest.fixture(scope="session")
def train_only_dataset(data_root):
    """A VQA dataset that has only a train split."""
    from energon_plugins.synthetic import write_dataset

    return write_dataset(
        data_root / "train-only",
        kind="vqa",
        num_samples=10,
        samples_per_shard=5,
        split_ratio=(("train", 1.0),),
    )


@pytest.fixture(scope="session")
def tokenizer():
    """The offline demo tokenizer (byte-level BPE with ``<image>`` and a chat template)."""
    from energon_plugins.synthetic import build_demo_tokenizer

    return build_demo_tokenizer()


@pytest.fixture(scope="session")
def clip_processor():
    """A transformers CLIP image processor with default settings (no download)."""
    import transformers

    return transformers.CLIPImageProcessor()


@pytest.fixture(scope="session")
def small_clip_processor():
    """A CLIP image processor at 28 px with 14 px patches (4 image tokens per image): small
    tensors for tests of the loops, which do not care about the image size."""
    import transformers

    return transformers.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name the order's seed even under ``-q`` (pytest-randomly prints it only in the header),
    so a failure that depends on the order can be replayed with ``--randomly-seed=N``."""
    seed = getattr(config.option, "randomly_seed", None)  # absent under -p no:randomly
    if seed is not None:
        terminalreporter.write_line(f"test order: --randomly-seed={seed}")


@pytest.fixture(scope="session")
def local_s3(tmp_path_factory):
    """A real S3-compatible server (moto, a separate process on 127.0.0.1) for this session.

    Tests make their own bucket (``local_s3.create_bucket(unique name)``) and set
    ``local_s3.environment()`` around the code that reads ``msc://`` paths.
    """
    from energon_plugins.testing.object_store import LocalS3

    with LocalS3.start(tmp_path_factory.mktemp("s3")) as server:
        yield server
