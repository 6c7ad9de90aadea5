"""Session fixtures of the hf-processor tests: tiny processors and real Energon datasets.

Every family's processor directory is written once per session (under a temporary folder)
and loaded back through ``AutoProcessor``, as a user's model directory would be. The datasets
are real Energon datasets, prepared with Energon's own prepare API.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Hand-written conversations: single image, several images, text only, several turns, a
# system turn, GPT-style and ChatML turns, list-of-parts content. Image sizes (w, h) are tiny
# and of mixed aspect ratios so that tiles, grids and padding differ between images.
CONVERSATIONS = {
    "single": ([(40, 60)], [
        {"from": "human", "value": "<image>\nWhat color is the square?"},
        {"from": "gpt", "value": "The square is red."},
    ]),
    "multi": ([(70, 30), (30, 30)], [
        {"from": "human", "value": "<image>\n<image>\nWhich one is larger?"},
        {"from": "gpt", "value": "The first one."},
    ]),
    "text": ([], [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": "Hello."},
    ]),
    "turns": ([(56, 44)], [
        {"from": "human", "value": "<image>\nHow many circles are there?"},
        {"from": "gpt", "value": "There are 3 circles."},
        {"from": "human", "value": "What color is the background?"},
        {"from": "gpt", "value": "The background is blue."},
    ]),
    "system": ([(90, 50)], [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]},
        {"role": "assistant", "content": "A red circle on a blue background."},
    ]),
    "twotext": ([], [
        {"from": "human", "value": "One?"},
        {"from": "gpt", "value": "One."},
        {"from": "human", "value": "Two?"},
        {"from": "gpt", "value": "Two."},
    ]),
}


def _make_image(size, seed):
    """A small RGB image with random pixels (PNG round-trips it exactly)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = size
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(scope="session")
def processor_dirs(tmp_path_factory):
    """Family name -> a saved tiny processor directory (every family, built once)."""
    from energon_plugin_hf_processor.tiny import TINY_FAMILIES, save_tiny_processor

    root = tmp_path_factory.mktemp("hf-processors")
    return {family: save_tiny_processor(family, root / family) for family in TINY_FAMILIES}


@pytest.fixture(scope="session")
def conversation_data(tmp_path_factory):
    """A crude ``chatml`` Energon dataset of :data:`CONVERSATIONS` (train split only).

    Returns ``(path, originals)`` with ``originals[key] = (images, conversation)``.
    """
    from energon_plugins.testing import write_crude_dataset

    root = tmp_path_factory.mktemp("hf-conversations")
    originals = {}
    samples = []
    for n, (key, (sizes, conversation)) in enumerate(CONVERSATIONS.items()):
        images = [_make_image(size, 100 * n + i) for i, size in enumerate(sizes)]
        originals[key] = (images, conversation)
        samples.append((key, images, conversation))
    write_crude_dataset(root, samples, fmt="chatml", samples_per_shard=2,
                        split_ratio=(("train", 1.0),))
    return root, originals


def _datamodule(path, processor_dir, tokenizer, *, packed, seq_length=2048, **options):
    import energon_plugins

    kwargs = {}
    if packed:
        kwargs = {"packing": energon_plugins.create("packing_strategy", "first-fit-decreasing"),
                  "packing_buffer_size": 6}
    return energon_plugins.EnergonMultiModalDataModule(
        str(path), tokenizer, None, seq_length=seq_length, micro_batch_size=2, num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={"name": "hf-processor",
                      "options": {"processor": str(processor_dir), "padding": "longest", **options}},
        batch_format=None,  # the task encoder's own batch
        **kwargs,
    )


def _batches(dm, keys):
    """Batches until every key was seen."""
    seen = set()
    loader = dm.train_dataloader()
    for _ in range(4 * len(keys)):
        batch = next(loader)
        yield batch
        seen.update(k for key in batch.__key__ for k in key.split(","))
        if seen >= set(keys):
            return
    raise AssertionError(f"keys never seen: {sorted(set(keys) - seen)}")



@pytest.fixture(scope="session")
def make_datamodule():
    """``make_datamodule(path, processor_dir, tokenizer, *, packed, seq_length=2048, **options)``:
    the real datamodule with the ``hf-processor`` encoder (batches of 2, no shuffling)."""
    return _datamodule


@pytest.fixture(scope="session")
def every_batch():
    """``every_batch(datamodule, keys)``: training batches until every key was seen."""
    return _batches


@pytest.fixture(scope="session")
def make_image():
    """``make_image((w, h), seed)``: a small RGB image with random pixels."""
    return _make_image
