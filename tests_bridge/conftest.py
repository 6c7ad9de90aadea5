"""Fixtures for the tests that run the released Megatron-Bridge on our datamodule.

These tests run only under ``make test-bridge``, in ``.venv-bridge`` (Python 3.12, megatron-core
0.19, megatron-bridge 0.6.2); the main suite (``testpaths``) does not collect this folder. One
process: torch.distributed with the gloo backend and a world of one, megatron-core's model
parallel groups built from it, real Energon datasets written by the session.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest


def pytest_configure(config):
    """Before any test module imports Bridge: its LoRA module's Transformer Engine stand-in."""
    import importlib.util

    if importlib.util.find_spec("megatron.bridge") is None:
        raise pytest.UsageError(
            "tests_bridge needs Megatron-Bridge installed: run `make test-bridge` "
            "(it builds .venv-bridge and runs them there)"
        )
    from tests_bridge.cpu_stand_ins import install_transformer_engine_for_lora

    install_transformer_engine_for_lora()


@pytest.fixture(autouse=True)
def _cuda_on_cpu():
    """Every test: CUDA placements go to the CPU where there is no GPU (cpu_stand_ins)."""
    from tests_bridge.cpu_stand_ins import cuda_on_cpu

    with cuda_on_cpu():
        yield


@pytest.fixture(scope="session")
def pg_collection(tmp_path_factory):
    """megatron-core's process groups over a one-process gloo world (what Bridge passes around)."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection

    store = tmp_path_factory.mktemp("dist") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    yield ProcessGroupCollection.use_mpu_process_groups()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def vqa_dataset(tmp_path_factory):
    """A prepared VQA dataset: 60 samples, 5 per shard, 45 train / 15 val (splits by shard)."""
    from energon_plugins.synthetic import write_dataset

    return write_dataset(
        tmp_path_factory.mktemp("data") / "vqa", kind="vqa", num_samples=60, samples_per_shard=5
    )


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    """The offline demo tokenizer, saved as a Hugging Face tokenizer folder."""
    from energon_plugins.synthetic import save_demo_tokenizer

    return save_demo_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture
def run_config(tmp_path, vqa_dataset, tokenizer_dir):
    """``run_config(**keys)``: an energon-plugins config file for the VQA dataset (28 px CLIP
    images, 4 image tokens), with ``keys`` added; returns its path."""
    import yaml

    from tests_bridge.bridge_run import MICRO_BATCH, SEQ

    def write(**keys):
        config = {
            "path": str(vqa_dataset.path),
            "tokenizer": {"path": str(tokenizer_dir)},
            "seq_length": SEQ,
            "micro_batch_size": MICRO_BATCH,
            "num_workers": 0,
            "shuffle_buffer_size": 10,
            "image_processor": {
                "name": "hf",
                "options": {
                    "class_name": "CLIPImageProcessor",
                    "kwargs": {"size": {"shortest_edge": 28}, "crop_size": {"height": 28, "width": 28}},
                },
            },
            "task_encoder": {"name": "multimodal", "options": {"image_tokens": 4}},
            **keys,
        }
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    return write
