"""``hf-processor`` against Megatron-Bridge's generic VLM encoder, for the five most-trained families.

Run: ``python benchmarks/processors/hf_processor_vs_bridge.py [--samples N] [--batch B]
[--families F ...] [--repeats R] [--json FILE]``.

Families: Qwen2.5-VL, Qwen3-VL, InternVL, Gemma 3, LLaVA-OneVision, each with the plugin's tiny
processor (``energon_plugin_hf_processor.tiny.save_tiny_processor``: the family's real
processor class, image processor and chat template, a small tokenizer). The samples are read
from a real Energon dataset (``_shared/realistic.py``: photograph-like JPEGs of 400-1600 px,
5-30 word questions, 30-300 word answers) by Energon's loader with ``SampleDecoder(image_decode=
"pil")``, once; both paths then encode the same decoded samples, so decoding is outside the
timing.

**The baseline replays Megatron-Bridge 0.6.2** (``.venv-bridge``, ``megatron/bridge/data/``):
``energon/hf_task_encoder.py`` ``HFTaskEncoder``, whose ``encode_sample`` only normalizes the
sample into a HF-style example (``conversation_processing.normalized_vlm_sample_to_hf_example``:
``user: [{"type": "image", "image": PIL}, {"type": "text", ...}]``, ``assistant: [text]``) and
whose ``batch`` hands the whole batch to the collator ``collators/registry.py`` resolves from the
processor's class:

- Qwen2.5-VL and Qwen3-VL: ``models/qwen_vl/data/collate_fn.py`` ``qwen2_5_collate_fn``:
  ``processor.apply_chat_template(conversation, tokenize=False)`` per example, then one
  ``processor(text=texts, images=per_example_images, padding=True, return_tensors="pt")`` for
  the batch (right padding), position ids, the loss mask, shifted labels.
- Gemma 3: ``models/gemma_vl/data/collate_fn.py`` ``gemma3_vl_collate_fn``: one
  ``processor.apply_chat_template([conversations], tokenize=True, padding=True,
  truncation=True, return_tensors="pt", return_dict=True)`` for the batch (images inline in
  the messages), position ids, the loss mask, shifted labels.
- InternVL and LLaVA-OneVision: Bridge registers no collator for ``InternVLProcessor`` or
  ``LlavaOnevisionProcessor`` (``resolve_model_collate`` raises), so a user passes
  ``collate_fn=``; the baseline gives them Gemma 3's, the model-agnostic one (it only calls
  ``apply_chat_template`` on the batch).

Left out of the replay, each making the baseline cheaper than Bridge (the ratios are lower
bounds): ``qwen_vl_utils.process_vision_info`` (not installed; it would resize every image once
more with PIL before the processor), Gemma's bf16 cast of the pixels, and
``build_assistant_loss_mask``, replaced by a scan for the assistant-turn marker tokens in the
ids (Bridge's also re-renders each conversation). Both paths get the same processor settings
(the real models' resolution budgets: Qwen ``max_pixels`` 448x448 as in ``hf_processor.py``;
the others the tiny processors' own sizes), one torch thread (samples/s per core), interleaved
rounds (alternating which path goes first, garbage collected before each); the figure is the
ratio of the median CPU times of a round (``process_time``: the
machine is shared, so wall time mostly measures the neighbours; the wall ratio is printed
beside it). Before timing, the script stops
unless both paths give identical token ids per sample and identical pixel values per batch.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json
from _shared.realistic import realistic_dataset

BENCHMARK = {
    "name": "hf_processor_vs_bridge",
    "full": ["--samples", "48", "--repeats", "3"],
    "quick": ["--quick"],
    "output": "file",
}

FAMILIES = ("qwen2.5-vl", "qwen3-vl", "internvl", "gemma3", "llava-onevision")
#: Bridge's collator per family: ``qwen`` (text per example, one processor call per batch) or
#: ``chat`` (one ``apply_chat_template`` call on the batch).
BRIDGE_COLLATE = {
    "qwen2.5-vl": "qwen",
    "qwen3-vl": "qwen",
    "internvl": "chat",
    "gemma3": "chat",
    "llava-onevision": "chat",
}
GOAL = 1.5


def read_samples(path: Path, count: int) -> list[Any]:
    """``count`` decoded samples of the Energon dataset at ``path`` (images as PIL), in order."""
    from megatron.energon import (
        DefaultTaskEncoder,
        SampleDecoder,
        WorkerConfig,
        get_savable_loader,
        get_val_dataset,
    )

    class Raw(DefaultTaskEncoder):
        decoder = SampleDecoder(image_decode="pil")

        def batch(self, samples):
            return samples

    dataset = get_val_dataset(
        str(path),
        split_part="train",
        batch_size=1,
        task_encoder=Raw(),
        worker_config=WorkerConfig.default_worker_config(0),
    )
    out = []
    for batch in get_savable_loader(dataset):
        out.extend(batch)
        if len(out) >= count:
            break
    return out[:count]


# ---------------------------------------------------------------------- the Bridge replay
def bridge_example(sample: Any) -> dict[str, Any]:
    """``HFTaskEncoder.encode_sample``: the sample as Bridge's HF-style example."""
    return {
        "conversation": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": sample.image},
                    {"type": "text", "text": sample.context},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": sample.answers[0]}]},
        ],
        "images": [sample.image],
    }


class BridgeReplay:
    """``HFTaskEncoder.batch`` with the collator Bridge resolves for the family (see the module
    docstring), the processor settings of the encoder under test."""

    def __init__(self, processor: Any, family: str, settings: dict[str, Any], end_of_turn: str) -> None:
        import torch

        self.processor, self.kind, self.settings = processor, BRIDGE_COLLATE[family], settings
        tok = processor.tokenizer
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        rendered = processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        prompt = rendered.rsplit("q", 1)[1]
        self.start_ids = tok(prompt.lstrip("\n"), add_special_tokens=False)["input_ids"]
        self.end_id = tok.convert_tokens_to_ids(end_of_turn)
        self.skipped = torch.tensor([i for i in (tok.pad_token_id,) if i is not None])

    def collate(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        """One batch: the processor call(s), position ids, loss mask and shifted labels."""
        import torch

        processor = self.processor
        side, processor.tokenizer.padding_side = processor.tokenizer.padding_side, "right"
        try:
            if self.kind == "qwen":
                texts = [processor.apply_chat_template(e["conversation"], tokenize=False) for e in examples]
                images = [list(e["images"]) for e in examples]
                batch = dict(
                    processor(text=texts, images=images, padding=True, return_tensors="pt", **self.settings)
                )
            else:
                batch = dict(
                    processor.apply_chat_template(
                        [e["conversation"] for e in examples],
                        tokenize=True,
                        padding=True,
                        truncation=True,
                        return_tensors="pt",
                        return_dict=True,
                        **self.settings,
                    )
                )
        finally:
            processor.tokenizer.padding_side = side
        ids = batch["input_ids"]
        rows, width = ids.shape
        batch["position_ids"] = torch.arange(width).unsqueeze(0).expand(rows, -1).clone()
        loss_mask = torch.stack([self.loss_mask(row) for row in ids]).to(torch.float32)
        labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
        if self.skipped.numel():
            labels = labels.masked_fill(torch.isin(labels, self.skipped), -100)
        loss_mask = torch.cat([loss_mask[:, 1:], torch.zeros_like(loss_mask[:, :1])], dim=1)
        batch["labels"] = labels.masked_fill(loss_mask == 0, -100)
        batch["loss_mask"] = loss_mask
        return batch

    def loss_mask(self, row: Any) -> Any:
        """The assistant answers (end-of-turn token included), found by their marker tokens."""
        import torch

        seq, n = row.tolist(), len(self.start_ids)
        mask = torch.zeros(len(seq))
        i = 0
        while i < len(seq):
            if seq[i : i + n] == self.start_ids:
                j = i + n
                while j < len(seq) and seq[j] != self.end_id:
                    j += 1
                mask[i + n : j + 1] = 1
                i = j
            i += 1
        return mask


# ---------------------------------------------------------------------- the two loops
def bridge_batches(replay: BridgeReplay, samples: list[Any], batch_size: int):
    """Bridge's loop: ``encode_sample`` per sample, ``batch`` per batch."""
    for b in range(0, len(samples), batch_size):
        yield replay.collate([bridge_example(s) for s in samples[b : b + batch_size]])


def encoder_batches(encoder: Any, samples: list[Any], batch_size: int):
    """The plugin's loop: ``encode_sample`` per sample, ``batch`` per batch; yields both."""
    for b in range(0, len(samples), batch_size):
        encoded = [encoder.encode_sample(s) for s in samples[b : b + batch_size]]
        yield encoded, encoder.batch(encoded)


def check_identical(
    family: str, encoder: Any, replay: BridgeReplay, samples: list[Any], batch_size: int
) -> None:
    """Stop unless every sample's token ids and every batch's pixel values are the same."""
    import torch

    for (encoded, batch), theirs in zip(
        encoder_batches(encoder, samples, batch_size),
        bridge_batches(replay, samples, batch_size),
        strict=True,
    ):
        for row, sample in enumerate(encoded):
            valid = theirs["attention_mask"][row].bool()
            if not torch.equal(sample.input_ids, theirs["input_ids"][row][valid]):
                raise SystemExit(f"{family}: token ids differ for sample {sample.__key__!r}")
        ours = torch.cat([s.pixel_values.reshape(-1) for s in encoded])
        if not torch.equal(ours, _valid_pixels(theirs).reshape(-1)):
            raise SystemExit(f"{family}: pixel values differ in a batch")


def _valid_pixels(batch: dict[str, Any]) -> Any:
    """The batch's pixel values less the padding images a padded layout adds (LLaVA-OneVision
    pads every image to the batch's most patches)."""
    import torch

    pixels = batch["pixel_values"]
    sizes = batch.get("image_sizes")
    if pixels.dim() == 5 and sizes is not None:
        return torch.cat([pixels[i, : _patch_count(batch, i)] for i in range(pixels.shape[0])])
    return pixels


def _patch_count(batch: dict[str, Any], index: int) -> int:
    nonzero = batch["pixel_values"][index].flatten(1).abs().sum(1) > 0
    return int(nonzero.nonzero().max()) + 1 if nonzero.any() else 0


# ---------------------------------------------------------------------- one family
def measure_family(
    family: str, samples: list[Any], batch_size: int, repeats: int, tmp: Path
) -> dict[str, Any]:
    """Build both paths for ``family``, check they agree, time them in interleaved rounds."""
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from energon_plugin_hf_processor.tiny import save_tiny_processor

    from energon_plugins.host.context import BuildContext

    directory = save_tiny_processor(family, tmp / family)
    budget = {"min_pixels": 56 * 56, "max_pixels": 448 * 448} if BRIDGE_COLLATE[family] == "qwen" else {}
    encoder = HFProcessorTaskEncoder(
        BuildContext(seq_length=16384),
        HFProcessorOptions(processor=str(directory), padding="longest", **budget),
    )
    settings = {
        **encoder.call_kwargs,
        **({"images_kwargs": encoder.image_kwargs} if encoder.image_kwargs else {}),
    }
    replay = BridgeReplay(encoder.processor, family, settings, encoder.renderer.end_of_turn[0])
    check_identical(family, encoder, replay, samples, batch_size)
    loops = {
        "bridge": lambda: bridge_batches(replay, samples, batch_size),
        "hf-processor": lambda: encoder_batches(encoder, samples, batch_size),
    }
    cpu: dict[str, list[float]] = {name: [] for name in loops}
    wall: dict[str, list[float]] = {name: [] for name in loops}
    for round_ in range(repeats):
        names = list(loops) if round_ % 2 == 0 else list(reversed(loops))  # no order favoured
        for name in names:
            loop = loops[name]
            gc.collect()  # neither path pays for the other's garbage
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in loop():
                pass
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    rates = {k: len(samples) / statistics.median(v) for k, v in cpu.items()}
    wall_rates = {k: len(samples) / statistics.median(v) for k, v in wall.items()}
    return {
        "samples_per_cpu_second": {k: round(v, 2) for k, v in rates.items()},
        "samples_per_second": {k: round(v, 2) for k, v in wall_rates.items()},
        "round_cpu_s": {k: [round(t, 3) for t in v] for k, v in cpu.items()},
        "ratio": round(rates["hf-processor"] / rates["bridge"], 3),
        "ratio_wall": round(wall_rates["hf-processor"] / wall_rates["bridge"], 3),
        "outputs_identical": True,
    }


def main() -> None:
    """Measure every family, print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.repeats = 8, 1

    import os
    import tempfile

    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()  # Bridge's apply_chat_template keyword style
    samples = read_samples(realistic_dataset(), args.samples)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            results[family] = measure_family(family, samples, args.batch, args.repeats, Path(tmp))
    rows = [
        [
            family,
            f"{r['samples_per_cpu_second']['bridge']:.1f}",
            f"{r['samples_per_cpu_second']['hf-processor']:.1f}",
            f"{r['ratio']:.2f}x",
            f"{r['ratio_wall']:.2f}x",
            "met" if r["ratio"] >= GOAL else "MISSED",
        ]
        for family, r in results.items()
    ]
    load = os.getloadavg()[0]
    print_table(
        f"hf-processor vs Megatron-Bridge's HFTaskEncoder replayed ({args.samples} samples, batch "
        f"{args.batch}, 1 thread, load {load:.1f}); outputs identical",
        [
            "family",
            "bridge samples/CPU s",
            "hf-processor samples/CPU s",
            "ratio (CPU)",
            "ratio (wall)",
            f">= {GOAL}x",
        ],
        rows,
    )
    figures = {
        "samples": args.samples,
        "batch": args.batch,
        "load_average": round(load, 2),
        "families": results,
    }
    if args.json:
        write_json(args.json, "hf_processor_vs_bridge", {**figures, "summary": summary_rows(figures)})


def summary_rows(figures: dict[str, Any]) -> list[list[Any]]:
    """One row per family for ``run_all.py``: the ratio against the replayed Bridge loop."""
    return [
        summary_row(
            f"samples per CPU s, hf-processor / Bridge HFTaskEncoder ({family}, 1 thread)",
            f"{r['samples_per_cpu_second']['hf-processor']} / {r['samples_per_cpu_second']['bridge']} "
            f"({r['ratio']:.2f}x; wall {r['ratio_wall']:.2f}x)",
            f">= {GOAL}x",
            r["ratio"] >= GOAL,
        )
        for family, r in figures["families"].items()
    ]


if __name__ == "__main__":
    main()
