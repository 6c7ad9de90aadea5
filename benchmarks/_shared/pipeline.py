"""The default pipeline the loader benchmarks share: demo data, a saved tokenizer, a config.

:func:`prepare` writes (or reuses) the demo metadataset (VQA + captioning, 32x32 PNG images)
and a saved demo tokenizer under a cache folder, and returns a config mapping for
``EnergonMultiModalDataModule.from_config``: the built-in ``multimodal`` task encoder and the
``hf`` image processor with a default CLIP processor (224 px), 0 workers unless changed.
"""

import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import Any

from . import CACHE_DIR as DEFAULT_CACHE

BATCH = 8
SEQ_LENGTH = 320


def clip_options() -> dict[str, Any]:
    """``hf`` options of a default CLIP processor (transformers' default, torchvision backend)."""
    return {"class_name": "CLIPImageProcessor"}


def prepare(
    cache_dir: str | Path | None = None, *, num_workers: int = 0, num_samples: int = 200
) -> dict[str, Any]:
    """Write the demo data and tokenizer once; return the datamodule config mapping."""
    from energon_plugins.synthetic import save_demo_tokenizer, write_demo_datasets

    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    info = write_demo_datasets(root / "demo", num_samples=num_samples)
    tokenizer_dir = root / "tokenizer"
    if not (tokenizer_dir / "tokenizer.json").exists():
        save_demo_tokenizer(tokenizer_dir)
    return {
        "path": str(info.path),
        "seq_length": SEQ_LENGTH,
        "micro_batch_size": BATCH,
        "global_batch_size": BATCH,
        "num_workers": num_workers,
        "shuffle_buffer_size": 100,
        "tokenizer": {"path": str(tokenizer_dir)},
        "image_processor": {"name": "hf", "options": clip_options()},
        "task_encoder": {"name": "multimodal"},
    }


@contextlib.contextmanager
def quiet_loading(torch_threads: int | None = 1):
    """Torch threads set to ``torch_threads`` (as in a loader worker) and pin-memory warnings off."""
    import torch

    previous = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            yield
    finally:
        torch.set_num_threads(previous)


def batch_size_of(batch: Any) -> int:
    """Rows in a batch (samples, unpacked): a list's length, else the rows of its ``input_ids``
    or ``tokens`` (a batch format's mapping or the task encoder's batch), else its key list."""
    if isinstance(batch, list):
        return len(batch)
    for key in ("input_ids", "tokens"):
        ids = batch.get(key) if isinstance(batch, dict) else getattr(batch, key, None)
        if ids is not None:
            return int(ids.shape[0])
    return len(batch.__key__)


def timed_batches(iterator: Any, batches: int) -> tuple[int, float, float]:
    """Pull ``batches`` batches; return (samples, wall seconds, this process's CPU seconds)."""
    samples = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        samples += batch_size_of(next(iterator))
    return samples, time.perf_counter() - wall, time.process_time() - cpu


def load_average() -> float | None:
    """The 1-minute load average (other processes share this machine), if known."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on Linux
        return None


def interleave(contenders: dict, rounds: int, batches: int, warmup: int = 3) -> dict:
    """Per-round CPU and wall samples/s of each ``name -> (iterator, before_fn)``."""
    for iterator, before in contenders.values():
        before()
        timed_batches(iterator, warmup)
    names = list(contenders)
    cpu = {n: [] for n in names}
    wall = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            iterator, before = contenders[name]
            before()
            samples, wall_s, cpu_s = timed_batches(iterator, batches)
            cpu[name].append(samples / cpu_s)
            wall[name].append(samples / wall_s)
    return {"cpu": cpu, "wall": wall}
