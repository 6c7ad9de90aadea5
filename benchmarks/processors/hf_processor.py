"""The ``hf-processor`` encoder against a hand-written loop that calls the processor per batch.

Run: ``python benchmarks/processors/hf_processor.py [--samples N] [--batch B] [--family F] [--json FILE]``.

The baseline is what Megatron-Bridge's generic ``HFEncoderTaskEncoder`` does (its
``encode_sample`` only reshapes the sample; its ``batch`` hands the batch to a per-processor
collate function): render every conversation with ``apply_chat_template(tokenize=False)``,
call the processor once per batch on the texts and images (``padding=True``), then build
the loss mask by finding the assistant turns' marker tokens in the ids. The encoder under
test renders and calls the processor per sample (so each sample's length is known before
packing) and collates with ``batch``. Same conversations (realistic lengths; the tiny
processor's tokenizer, trained on a few sentences, makes 3-5 tokens of a word), same
in-memory photograph-like images (already decoded, as Energon hands them), same processor
settings (the script stops unless both paths make the same pixel values), one torch thread
each (samples/s per core), both measured in this run, in interleaved rounds; the ratio of the
medians is the figure.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json
from _shared.realistic import photo, text

BENCHMARK = {
    "name": "hf_processor",
    "full": ["--samples", "96", "--repeats", "3"],
    "quick": ["--quick"],
    "output": "file",
}


def conversations(count: int, seed: int):
    """``count`` (turns, PIL images) conversations: 0-2 photograph-like images (long side
    300-1000 px), 1-2 turns of 8-30 word questions and 20-150 word answers."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        images = []
        for _ in range(int(rng.integers(0, 3))):
            long = int(rng.integers(300, 1001))
            short = int(round(long * rng.uniform(0.5, 1.0)))
            images.append(photo(rng, *((long, short) if rng.random() < 0.6 else (short, long))))
        tags = "<image>\n" * len(images)
        turns = []
        for turn in range(1 + int(rng.integers(0, 2))):
            question = text(rng, int(rng.integers(8, 31)), question=True)
            turns += [
                ("user", f"{tags if turn == 0 else ''}{question}"),
                ("assistant", text(rng, int(rng.integers(20, 151)))),
            ]
        out.append((turns, images))
    return out


def baseline_batches(processor, data, batch_size, start_marker, end_marker, settings):
    """Megatron-Bridge's generic path: the processor per batch, markers for the loss mask.

    ``settings``: the keyword arguments of the encoder's processor calls (its image size
    budget included), so both paths make the same pixels."""
    import torch

    tok = processor.tokenizer
    start_ids = tok(start_marker, add_special_tokens=False)["input_ids"]
    end_id = tok.convert_tokens_to_ids(end_marker)
    for b in range(0, len(data), batch_size):
        chunk = data[b : b + batch_size]
        texts, images = [], []
        for turns, imgs in chunk:
            messages = []
            imgs_iter = iter(imgs)
            for role, content in turns:
                parts = [{"type": "image", "image": next(imgs_iter)} for _ in range(content.count("<image>"))]
                parts.append({"type": "text", "text": content.replace("<image>\n", "")})
                messages.append({"role": role, "content": parts})
            texts.append(processor.apply_chat_template(messages, tokenize=False))
            images.append(list(imgs))
        with_images = any(images)
        out = processor(
            text=texts, images=images if with_images else None, padding=True, return_tensors="pt", **settings
        )
        ids = out["input_ids"]
        labels = torch.full_like(ids, -100)
        n = len(start_ids)
        for row in range(ids.shape[0]):
            seq = ids[row].tolist()
            i = 0
            while i < len(seq):
                if seq[i : i + n] == start_ids:
                    j = i + n
                    while j < len(seq) and seq[j] != end_id:
                        j += 1
                    labels[row, i + n : j + 1] = ids[row, i + n : j + 1]
                    i = j
                i += 1
        yield out, labels


def same_pixels(batch, baseline_out) -> None:
    """Stop unless both paths made the same pixels for the first batch (a baseline run with
    another image size budget would be timing other work)."""
    import torch

    ours, theirs = batch.pixel_values, baseline_out.get("pixel_values")
    if ours is None and theirs is None:
        return
    if ours is None or theirs is None or ours.shape != theirs.shape or not torch.allclose(ours, theirs):
        raise SystemExit(
            f"the encoder and the baseline made different pixel values: "
            f"{None if ours is None else tuple(ours.shape)} vs "
            f"{None if theirs is None else tuple(theirs.shape)}"
        )


def encoder_batches(encoder, samples, batch_size):
    for b in range(0, len(samples), batch_size):
        yield encoder.batch([encoder.encode_sample(s) for s in samples[b : b + batch_size]])


def main() -> None:
    """Time both paths on the same samples, print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--family", default="qwen2.5-vl")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (medians)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.repeats = 16, 1

    import tempfile

    import torch
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from energon_plugin_hf_processor.tiny import save_tiny_processor

    from energon_plugins.encoding.chat.chatml import ChatMLSample
    from energon_plugins.host.context import BuildContext

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        directory = save_tiny_processor(args.family, Path(tmp) / args.family)
        # The real model's resolution budget (Qwen2.5-VL: up to 1280 tokens per image) on a
        # tiny processor: the image work is the real one, the tokenizer is small.
        encoder = HFProcessorTaskEncoder(
            BuildContext(seq_length=8192),
            HFProcessorOptions(
                processor=str(directory), min_pixels=56 * 56, max_pixels=448 * 448, padding="longest"
            ),
        )
        processor = encoder.processor
        data = conversations(args.samples, seed=0)
        samples = [
            ChatMLSample(
                __key__=str(i),
                __restore_key__=(),
                conversation=[{"role": r, "content": c} for r, c in turns],
                images=imgs,
            )
            for i, (turns, imgs) in enumerate(data)
        ]
        settings = {
            **encoder.call_kwargs,
            **({"images_kwargs": encoder.image_kwargs} if encoder.image_kwargs else {}),
        }
        same_pixels(
            next(encoder_batches(encoder, samples, args.batch)),
            next(
                baseline_batches(
                    processor, data, args.batch, "<|im_start|>assistant\n", "<|im_end|>", settings
                )
            )[0],
        )
        timings = {"encoder": [], "baseline": []}
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in encoder_batches(encoder, samples, args.batch):
                pass
            timings["encoder"].append(time.perf_counter() - start)
            start = time.perf_counter()
            for _ in baseline_batches(
                processor, data, args.batch, "<|im_start|>assistant\n", "<|im_end|>", settings
            ):
                pass
            timings["baseline"].append(time.perf_counter() - start)
    rates = {k: args.samples / statistics.median(v) for k, v in timings.items()}
    ratio = rates["encoder"] / rates["baseline"]
    rows = [
        [
            name,
            f"{rates[name]:.1f}",
            f"{1000 / rates[name]:.2f}",
            f"{min(timings[name]):.2f}-{max(timings[name]):.2f}",
        ]
        for name in ("baseline", "encoder")
    ]
    print_table(
        f"hf-processor vs per-batch processor loop ({args.family}, {args.samples} samples, "
        f"batch {args.batch}, 1 thread)",
        ["path", "samples/s", "ms/sample", "round s (range)"],
        rows,
    )
    print(
        f"ratio encoder / baseline: {ratio:.2f}x (per-sample processor calls with exact "
        "lengths and labels vs one call per batch)"
    )
    figures = {
        "family": args.family,
        "samples": args.samples,
        "batch": args.batch,
        "samples_per_second": {k: round(v, 2) for k, v in rates.items()},
        "ratio_encoder_over_baseline": round(ratio, 3),
    }
    if args.json:
        write_json(args.json, "hf_processor", {**figures, "summary": summary_rows(figures)})


def summary_rows(figures: dict) -> list[list]:
    """The key figure for ``run_all.py``: samples/s of the encoder against the per-batch loop."""
    rates = figures["samples_per_second"]
    return [
        summary_row(
            f"samples/s, hf-processor / per-batch processor loop ({figures['family']}, 1 thread)",
            f"{rates['encoder']} / {rates['baseline']} ({figures['ratio_encoder_over_baseline']:.2f}x)",
        )
    ]


if __name__ == "__main__":
    main()
