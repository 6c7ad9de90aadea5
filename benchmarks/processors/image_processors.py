"""Image processors per image: fast-clip / fast-siglip / fast-qwen2-vl against transformers.

Run: ``python benchmarks/processors/image_processors.py [--per-size 6] [--rounds 5] [--json FILE] [--quick]``.

Images: photographs-like JPEGs (:func:`_shared.realistic.photo`) whose long side is 224, 448, 800,
1200 and 1600 px (aspect ratios 1:1 to 2:1), ``--per-size`` of each. Every processor is called
once per image (as a task encoder calls it), on the same decoded ``uint8 (3, H, W)`` tensors
(decoding excluded), in interleaved rounds; the figure is the median over rounds of the time
per image, and a ratio is transformers' time over the fast processor's, per size. Baselines:
transformers' default backend (``CLIPImageProcessor``, ``SiglipImageProcessor``,
``Qwen2VLImageProcessor``: torchvision) and, for CLIP/SigLIP, the PIL backend
(``*ImageProcessorPil``, fed PIL images) that ``resize_kernel: pillow`` reproduces. Torch
threads: 1 (as in a loader worker). A last column times the fast processors from the encoded
JPEG bytes (decoding included, as in the loader), against PIL decode + transformers.
Accuracy: max / mean absolute difference of the pixel values from the reference each option
reproduces, and whether the Qwen grids are identical.

For Qwen the run also times the floor any processor with transformers' output has on these
inputs: the resize alone (torch's uint8 antialiased bicubic kernel, transformers' own call)
plus filling an output of the same size (float32 patches, the frame repeated for the temporal
patch) from the same reused output memory the fast processor gets; transformers' time over
that floor is the highest ratio reachable without a faster resize kernel.
"""

import argparse
import io
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import goal_line, goal_rows, print_table, summary_row, write_json
from _shared.realistic import photo

BENCHMARK = {"name": "image_processors", "full": [], "quick": ["--quick"], "output": "file"}

SIDES = (224, 448, 800, 1200, 1600)
QWEN_GOAL = 3.0


def images(per_size: int, seed: int = 0) -> dict[int, list[bytes]]:
    """``long side -> JPEG bytes`` of photographs-like images."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for side in SIDES:
        jpegs = []
        for _ in range(per_size):
            short = int(round(side * rng.uniform(0.5, 1.0)))
            w, h = (side, short) if rng.random() < 0.6 else (short, side)
            buf = io.BytesIO()
            photo(rng, w, h).save(buf, "JPEG", quality=90)
            jpegs.append(buf.getvalue())
        out[side] = jpegs
    return out


def per_image_ms(contenders: dict, inputs: dict, rounds: int) -> dict[str, float]:
    """Median over interleaved rounds of ms per image, one call per image."""
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds + 1):  # the first round warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn, items = contenders[name], inputs[name]
            start = time.perf_counter()
            for item in items:
                fn(item)
            if r:
                times[name].append((time.perf_counter() - start) / len(items) * 1000)
    return {n: statistics.median(v) for n, v in times.items()}


def _qwen_resize(processor, chw):
    """The resize alone, as transformers' torchvision backend (and ``fast-qwen2-vl``) calls it."""
    import torch.nn.functional as F

    target = processor.resize_target(*chw.shape[-2:])
    return F.interpolate(chw[None], size=target, mode="bicubic", antialias=True)


def _qwen_output_fill(processor, chw):
    """Fill a Qwen output of this image's size: the least writing any processor does."""
    from energon_plugins.encoding.memory.outputs import new_output

    _, rows, cols = processor.grid_for(*chw.shape[-2:])
    width = 3 * processor.temporal_patch_size * processor.patch_size**2
    return new_output((rows * cols, width)).fill_(0.0)


def main(argv=None) -> dict:
    """Measure, print, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-size", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.per_size, args.rounds = 1, 1

    import PIL.Image
    import torch
    import transformers

    import energon_plugins
    from energon_plugins.encoding.image_processors.inputs import decode_uint8

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    by_side = images(args.per_size)
    clip_kw = {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336}}
    families = {
        "clip": (
            transformers.CLIPImageProcessor(**clip_kw),
            transformers.CLIPImageProcessorPil(**clip_kw),
            energon_plugins.create(
                "image_processor", "fast-clip", {"size": {"shortest_edge": 336}, "crop_size": 336}
            ),
            energon_plugins.create(
                "image_processor",
                "fast-clip",
                {"size": {"shortest_edge": 336}, "crop_size": 336, "resize_kernel": "pillow"},
            ),
        ),
        "siglip": (
            transformers.SiglipImageProcessor(),
            transformers.SiglipImageProcessorPil(),
            energon_plugins.create("image_processor", "fast-siglip"),
            energon_plugins.create("image_processor", "fast-siglip", {"resize_kernel": "pillow"}),
        ),
        "qwen2-vl": (
            transformers.Qwen2VLImageProcessor(),
            None,
            energon_plugins.create("image_processor", "fast-qwen2-vl"),
            None,
        ),
    }
    result = {
        "sides": list(SIDES),
        "per_size": args.per_size,
        "rounds": args.rounds,
        "load_average_before": [round(v, 2) for v in os.getloadavg()],
        "rows": [],
    }
    rows = []
    for family, (hf, hf_pil, fast, fast_pil) in families.items():
        for side, jpegs in by_side.items():
            u8 = [decode_uint8(j) for j in jpegs]
            pils = [PIL.Image.open(io.BytesIO(j)).convert("RGB") for j in jpegs]
            contenders = {
                "hf": lambda x, p=hf: p(images=[x], return_tensors="pt"),
                "fast": lambda x, p=fast: p(images=[x]),
                "hf_from_jpeg": lambda j, p=hf: p(
                    images=[PIL.Image.open(io.BytesIO(j)).convert("RGB")], return_tensors="pt"
                ),
                "fast_from_jpeg": lambda j, p=fast: p(images=[j]),
            }
            inputs = {"hf": u8, "fast": u8, "hf_from_jpeg": jpegs, "fast_from_jpeg": jpegs}
            if family == "qwen2-vl":
                contenders.update(
                    {
                        "resize_only": lambda x, p=fast: _qwen_resize(p, x),
                        "output_write": lambda x, p=fast: _qwen_output_fill(p, x),
                    }
                )
                inputs.update({"resize_only": u8, "output_write": u8})
            if hf_pil is not None:
                contenders.update(
                    {
                        "hf_pil": lambda x, p=hf_pil: p(images=[x], return_tensors="pt"),
                        "fast_pillow": lambda x, p=fast_pil: p(images=[x]),
                    }
                )
                inputs.update({"hf_pil": pils, "fast_pillow": u8})
            ms = per_image_ms(contenders, inputs, args.rounds)
            ref = hf(images=u8, return_tensors="pt")
            out = fast(images=u8)
            diff = (out["pixel_values"] - ref["pixel_values"]).abs()
            row = {
                "family": family,
                "long_side": side,
                "hf_ms": round(ms["hf"], 2),
                "fast_ms": round(ms["fast"], 2),
                "ratio": round(ms["hf"] / ms["fast"], 2),
                "from_jpeg_hf_ms": round(ms["hf_from_jpeg"], 2),
                "from_jpeg_fast_ms": round(ms["fast_from_jpeg"], 2),
                "from_jpeg_ratio": round(ms["hf_from_jpeg"] / ms["fast_from_jpeg"], 2),
                "max_abs_diff": round(float(diff.max()), 6),
                "mean_abs_diff": float(f"{float(diff.mean()):.2e}"),
            }
            if "image_grid_thw" in ref:
                row["grids_identical"] = bool(torch.equal(ref["image_grid_thw"], out["image_grid_thw"]))
            if "resize_only" in ms:
                floor = ms["resize_only"] + ms["output_write"]
                row.update(
                    resize_ms=round(ms["resize_only"], 2),
                    output_write_ms=round(ms["output_write"], 2),
                    ceiling_ratio=round(ms["hf"] / floor, 2),
                )
            if hf_pil is not None:
                pil_ref = hf_pil(images=pils, return_tensors="pt")["pixel_values"]
                pil_diff = (fast_pil(images=u8)["pixel_values"] - pil_ref).abs()
                default_vs_pil = (out["pixel_values"] - pil_ref).abs()
                row.update(
                    pil_hf_ms=round(ms["hf_pil"], 2),
                    pillow_kernel_ms=round(ms["fast_pillow"], 2),
                    pillow_kernel_ratio=round(ms["hf_pil"] / ms["fast_pillow"], 2),
                    pillow_kernel_max_abs_diff_vs_pil=round(float(pil_diff.max()), 6),
                    default_max_abs_diff_vs_pil=round(float(default_vs_pil.max()), 6),
                    default_mean_abs_diff_vs_pil=float(f"{float(default_vs_pil.mean()):.2e}"),
                )
            result["rows"].append(row)
            rows.append(
                [
                    family,
                    side,
                    row["hf_ms"],
                    row["fast_ms"],
                    f"{row['ratio']}x",
                    f"{row['max_abs_diff']} / {row['mean_abs_diff']}",
                    f"{row['from_jpeg_hf_ms']} / {row['from_jpeg_fast_ms']} ({row['from_jpeg_ratio']}x)",
                    f"{row.get('pil_hf_ms', '-')} / {row.get('pillow_kernel_ms', '-')} "
                    f"({row.get('pillow_kernel_ratio', '-')}x)",
                ]
            )
    print_table(
        f"Image processors, ms per image (median of {args.rounds} interleaved rounds, "
        f"{args.per_size} photos per size, 1 torch thread)",
        [
            "family",
            "long side px",
            "transformers (torchvision) ms",
            "fast ms",
            "ratio",
            "max / mean |diff|",
            "from JPEG: PIL+hf / fast ms",
            "PIL backend / pillow kernel ms",
        ],
        rows,
    )
    qwen = [r for r in result["rows"] if r["family"] == "qwen2-vl"]
    for r in qwen:
        print(
            f"  qwen2-vl {r['long_side']} px: floor {r['resize_ms']} ms resize + {r['output_write_ms']} ms "
            f"output write -> at most {r['ceiling_ratio']}x transformers ({r['ratio']}x reached)"
        )
    result["goals"] = [
        {
            "goal": f"fast-qwen2-vl >= {QWEN_GOAL}x transformers' default backend per image, 224-1600 px",
            "met": all(r["ratio"] >= QWEN_GOAL for r in qwen),
            "detail": ", ".join(f"{r['long_side']} px {r['ratio']}x" for r in qwen)
            + f"; grids identical: {all(r.get('grids_identical') for r in qwen)}; "
            f"max diff {max(r['max_abs_diff'] for r in qwen)}; ceiling with torch's resize kernel: "
            + ", ".join(f"{r['ceiling_ratio']}x" for r in qwen),
        }
    ]
    for g in result["goals"]:
        print(goal_line(g["goal"], g["met"], g["detail"]))
    result["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
    result["summary"] = summary_rows(result)
    if args.json:
        print(f"wrote {write_json(args.json, 'image_processors', result)}")
    return result


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: ms per image of each family and size, the goal."""
    rows = [
        summary_row(
            f"{row['family']} {row['long_side']} px: transformers (torchvision) / fast, ms per image",
            f"{row['hf_ms']} / {row['fast_ms']} ({row['ratio']}x; max diff "
            f"{row['max_abs_diff']}; from JPEG {row['from_jpeg_ratio']}x)",
        )
        for row in result["rows"]
    ]
    return rows + goal_rows(result["goals"])


if __name__ == "__main__":
    main()
