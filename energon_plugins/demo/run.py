"""The demo run: generated data, an offline tokenizer, the real datamodule, a readable summary.

:func:`run_demo` writes a small VQA + captioning metadataset into the cache folder (reused on
later runs), builds :class:`~energon_plugins.EnergonMultiModalDataModule` with the demo
tokenizer and a default CLIP image processor (through the ``hf`` plugin), iterates a few
hundred samples of the task encoder's batches (no batch format: labels aligned with the
tokens) and prints samples/s, the keys, shapes and dtypes of the batch the training loop reads
(the first batch in the default ``megatron-bridge`` format, or the config's) and one decoded
sample with its image span collapsed and its labelled tokens marked. A ``status`` (the CLI's
start-up spinner) is told each step as it starts.
"""

import time
import warnings
from pathlib import Path
from typing import Any

DEFAULT_SAMPLES = 320
DEFAULT_BATCH = 8
DEFAULT_SEQ_LENGTH = 320


def _default_clip_options() -> dict[str, Any]:
    """``hf`` options for a default CLIP processor (transformers' default, torchvision backend)."""
    return {"class_name": "CLIPImageProcessor"}


def collapse_sample(
    tokenizer: Any, input_ids: list[int], labels: list[int], *, image_token_id: int, ignore_index: int
) -> list[tuple[str, bool]]:
    """Split one row into ``(text, labelled)`` pieces; image-token runs become ``<image xN>``."""
    pieces: list[tuple[str, bool]] = []
    i, n = 0, len(input_ids)
    while i < n:
        if input_ids[i] == image_token_id:
            j = i
            while j < n and input_ids[j] == image_token_id:
                j += 1
            pieces.append((f"<image x{j - i}>", False))
            i = j
            continue
        labelled = labels[i] != ignore_index
        j = i
        while j < n and input_ids[j] != image_token_id and (labels[j] != ignore_index) == labelled:
            j += 1
        pieces.append((tokenizer.decode(input_ids[i:j]), labelled))
        i = j
    return pieces


def _iterate(loader: Any, samples: int) -> tuple[int, float, float, Any]:
    """Load at least ``samples`` samples; return (loaded, seconds, first-batch seconds, first)."""
    start = time.perf_counter()
    first = None
    first_batch_s = 0.0
    loaded = 0
    while loaded < samples:
        batch = next(loader)
        if first is None:
            first, first_batch_s = batch, time.perf_counter() - start
        loaded += int(batch.input_ids.shape[0])
    return loaded, time.perf_counter() - start, first_batch_s, first


def run_demo(
    cache_dir: str | Path | None = None,
    *,
    config: str | Path | None = None,
    samples: int = DEFAULT_SAMPLES,
    micro_batch_size: int = DEFAULT_BATCH,
    seq_length: int = DEFAULT_SEQ_LENGTH,
    num_workers: int = 0,
    torch_threads: int | None = 1,
    console: Any = None,
    status: Any = None,
) -> dict[str, Any]:
    """Run the demo and return its figures (JSON-serialisable).

    Args:
        cache_dir: where the generated datasets live (default: ``default_cache_dir()/demo``).
        config: run on this config file instead (e.g. ``examples/llava.yaml``); its dataset,
            tokenizer, encoder, batch size and workers are used, and nothing is generated.
        samples: how many samples to load (rounded up to whole batches).
        micro_batch_size, seq_length, num_workers: datamodule settings.
        torch_threads: torch intra-op threads while loading in this process (restored
            afterwards). 1, as in Energon's worker processes: per-sample tensor work is tiny
            and a thread pool only adds latency, badly so on a busy 2-core machine.
            ``None`` leaves torch's setting alone.
        console: a ``rich`` console to print the summary to; ``None`` prints nothing (the CLI's
            ``demo --json`` prints the returned figures instead).
        status: an object with ``update(message)`` and ``stop()`` (the CLI's
            :func:`~energon_plugins.cli._output.startup_status`), told each step; stopped
            before the summary is printed. ``None``: nothing is reported.

    Returns:
        ``samples``, ``batches``, ``seconds``, ``samples_per_s``, ``first_batch_s``,
        ``batch_shapes`` (the task encoder's batch), ``batch_format`` and ``loop_batch``
        (``{key: "shape dtype"}`` of the first batch as the training loop reads it),
        ``decoded_sample``, ``label_tokens``, ``image_tokens``, ``error_counts``, ``dataset``.
    """
    from energon_plugins.synthetic import default_cache_dir

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    step = status.update if status is not None else (lambda message: None)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir() / "demo"

    step("importing torch, transformers and Energon...")
    import energon_plugins
    from energon_plugins.host.defaults import DEFAULT_BATCH_FORMAT
    from energon_plugins.loading.startup import import_heavy_modules
    from energon_plugins.synthetic import build_demo_tokenizer, write_demo_datasets

    import_heavy_modules()
    t0 = time.perf_counter()
    batch_format: dict[str, Any] | str | None
    if config is not None:
        from energon_plugins import build_datamodule
        from energon_plugins.config.load import load_config
        from energon_plugins.loading.startup import configured_batch_format

        step(f"checking {config} and building its datamodule...")
        checked = load_config(config)
        batch_format = configured_batch_format(checked)
        dm = build_datamodule(checked, batch_format=None)  # the encoder's batch, decoded below
        tokenizer, micro_batch_size, num_workers = dm.tokenizer, dm.micro_batch_size, dm.num_workers
    else:
        batch_format = DEFAULT_BATCH_FORMAT
        step(f"writing the demo dataset (once) into {root}...")
        info = write_demo_datasets(root)
        step("loading the demo tokenizer and the CLIP image processor...")
        tokenizer = build_demo_tokenizer()
        processor = energon_plugins.create("image_processor", "hf", _default_clip_options())
        dm = energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tokenizer,
            processor,
            seq_length=seq_length,
            micro_batch_size=micro_batch_size,
            num_workers=num_workers,
            batch_format=None,  # the task encoder's batch, decoded below
        )
    t_data = time.perf_counter() - t0
    step(f"building the loader ({num_workers} worker{'s' * (num_workers != 1)})...")
    loader = dm.train_dataloader()
    step(f"loading {samples} samples...")

    import torch

    previous_threads = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    try:
        with warnings.catch_warnings():
            # CPU-only torch: Energon 7.4 asks for pinned memory unconditionally and torch
            # warns when the first batch is fetched; nothing is pinned, nothing to report.
            warnings.filterwarnings("ignore", message=".*pin_memory.*no accelerator.*")
            loaded, seconds, first_batch_s, first = _iterate(loader, samples)
    finally:
        torch.set_num_threads(previous_threads)
    n_batches = -(-loaded // micro_batch_size)

    shapes = {}
    for name in (
        "input_ids",
        "labels",
        "loss_mask",
        "position_ids",
        "attention_mask",
        "pixel_values",
        "num_images",
    ):
        value = getattr(first, name, None)
        if value is not None:
            shapes[name] = list(value.shape)
    from energon_plugins.preview.batch_view import batch_layout, loop_batch_format

    fmt, format_label = loop_batch_format(dm, batch_format)
    loop_batch = batch_layout(fmt(first) if fmt is not None else first)
    encoder = dm.task_encoder
    ignore = encoder.ignore_index
    image_id = encoder.image_token_id
    real = int(first.attention_mask[0].sum()) if first.attention_mask is not None else None
    ids = first.input_ids[0, :real].tolist()
    labels = first.labels[0, :real].tolist()
    pieces = collapse_sample(tokenizer, ids, labels, image_token_id=image_id, ignore_index=ignore)
    label_tokens = sum(1 for x in labels if x != ignore)
    image_tokens = sum(1 for x in ids if x == image_id)

    result = {
        "dataset": dm.path,
        "samples": loaded,
        "batches": n_batches,
        "seconds": round(seconds, 4),
        "samples_per_s": round(loaded / seconds, 1) if seconds > 0 else None,
        "first_batch_s": round(first_batch_s or 0.0, 4),
        "data_prepare_s": round(t_data, 4),
        "num_workers": num_workers,
        "torch_threads": torch_threads if torch_threads is not None else previous_threads,
        "batch_shapes": shapes,
        "batch_format": format_label or None,
        "loop_batch": {field.name: field.describe() for field in loop_batch},
        "decoded_sample": "".join(text for text, _ in pieces),
        "sample_key": first.__key__[0],
        "sequence_tokens": len(ids),
        "padded_to": int(first.input_ids.shape[1]),
        "label_tokens": label_tokens,
        "image_tokens": image_tokens,
        "error_counts": encoder.error_counts(),
    }
    if status is not None:
        status.stop()
    if console is not None:
        _print(console, result, pieces, ignore)
    return result


def _print(console: Any, result: dict[str, Any], pieces: list[tuple[str, bool]], ignore: int) -> None:
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    console.print(f"[bold]energon-plugins demo[/bold]  dataset: {result['dataset']}")
    figures = Table(title="Loading", show_header=False, box=None, padding=(0, 2))
    figures.add_row("samples loaded", str(result["samples"]))
    figures.add_row("batches", str(result["batches"]))
    figures.add_row("time", f"{result['seconds']:.2f} s (first batch {result['first_batch_s']:.2f} s)")
    figures.add_row("throughput", f"[bold green]{result['samples_per_s']} samples/s[/]")
    figures.add_row("workers", f"{result['num_workers']} (torch threads: {result['torch_threads']})")
    skipped = result["error_counts"]
    figures.add_row("skipped", ", ".join(f"{k}: {v}" for k, v in skipped.items()) or "none")
    console.print(figures)

    label = result["batch_format"] or "the task encoder's batch (no batch format)"
    shapes = Table(title="What the training loop reads", caption=escape(label))
    shapes.add_column("key")
    shapes.add_column("shape and dtype / value")
    for name, described in result["loop_batch"].items():
        shapes.add_row(escape(name), escape(described))
    console.print(shapes)

    text = Text()
    if pieces:
        last, labelled = pieces[-1]
        pieces = [*pieces[:-1], (last.rstrip(), labelled)]
    for piece, labelled in pieces:
        if piece.startswith("<image x"):
            text.append(piece, style="bold magenta")
        elif labelled:
            text.append(piece, style="bold green underline")
        else:
            text.append(piece, style="dim")
    console.print(
        Panel(
            text,
            title=f"sample {result['sample_key']} ({result['sequence_tokens']} tokens, padded "
            f"to {result['padded_to']})",
        )
    )
    console.print(
        f"[bold green underline]green[/]: the {result['label_tokens']} tokens that carry "
        f"labels (the answer); [dim]dim[/] prompt and [bold magenta]image[/] tokens "
        f"({result['image_tokens']}) and the padding are masked with {ignore}."
    )
