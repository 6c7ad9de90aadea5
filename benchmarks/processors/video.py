"""Decode time per video: seek-based frame sampling against decoding every frame.

Run: ``python benchmarks/processors/video.py [--durations 10,30,60] [--height 480] [--repeats 3]
[--quick] [--json FILE]``.

The videos are generated once (H.264 in MP4, 30 fps, 480p: a panned texture under a moving
bar, so the bit rate and decode cost are those of filmed video rather than of a flat
picture), with two keyframe intervals: x264's default (up to 250 frames) and 2 s (60 frames),
and cached under ``benchmarks/results/.cache/videos``. For each video and each frame choice
(8 and 32 frames, 1 and 2 fps), the same kept frames are decoded

- ``seek``: as the encoders do: Energon's ``AVDecoder`` reads the metadata, then decodes only
  the kept frames (``energon_plugins.encoding.video.decode``: its reader seeks to the keyframe
  before each kept frame when one lies ahead);
- ``decode-all``: transformers' PyAV loader (``load_video(backend="pyav")``, what a processor's
  own video loading runs): every frame decoded up to the last kept one, the kept ones
  converted; with PyAV's default decoder threads, as users get it;
- ``decode-all 1 thread``: the same loop on a decoder limited to one thread, as Energon opens
  every container (so the work per core compares directly).

The kept frames of the three paths are checked equal. Each figure is the best of
``--repeats`` rounds, wall and CPU time (process time, all threads), all measured in this run.
The figure is decode-all (1 thread) / seek in CPU time: both decode on one thread, so CPU time
is their work, unmoved by the other processes of a busy machine; the wall-time ratio against
PyAV's default threads is printed beside it. Torch runs one thread, as in a loader worker.
"""

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared import CACHE_DIR
from _shared.common import print_table, summary_row, write_json

BENCHMARK = {"name": "video", "full": ["--repeats", "3"], "quick": ["--quick"], "output": "file"}

FPS = 30
CHOICES = {
    "8 frames": {"num_frames": 8},
    "32 frames": {"num_frames": 32, "max_frames": 32},
    "1 fps": {"fps": 1.0, "max_frames": 768},
    "2 fps": {"fps": 2.0, "max_frames": 768},
}
GOPS = {"x264 default": None, "2 s": 60}


def cached_video(cache: Path, seconds: int, height: int, gop: int | None) -> Path:
    """The generated test video (written once, reused by later runs)."""
    import av

    from energon_plugins.testing.video import iter_video_frames

    width = (height * 16 // 9) // 2 * 2
    path = cache / f"pan-{seconds}s-{height}p-{FPS}fps-gop{gop or 'default'}.mp4"
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part.mp4")
    with av.open(str(tmp), "w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23", **({"g": str(gop)} if gop else {})}
        for frame in iter_video_frames(seconds * FPS, (width, height), seed=seconds, texture=True):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    tmp.rename(path)
    return path


def seek_decode(data: bytes, options):
    """The encoders' path: metadata, frame choice, only the kept frames decoded."""
    from megatron.energon.av import AVDecoder

    from energon_plugins.encoding.video.decode import decode_frames, read_video_info
    from energon_plugins.encoding.video.sampling import frame_count, frame_indices

    decoder = AVDecoder(io.BytesIO(data))
    info = read_video_info(decoder)
    indices = frame_indices(info.num_frames, frame_count(info, options))
    return decode_frames(decoder, info, indices).frames.permute(0, 2, 3, 1).numpy(), indices


def decode_all(path: Path, indices, one_thread: bool):
    """transformers' PyAV loader: every frame up to the last kept one decoded."""
    from transformers.video_utils import read_video_pyav

    if not one_thread:
        frames, _ = read_video_pyav(str(path), lambda metadata, **kw: indices)
        return frames
    import av

    with av.open(str(path)) as container:
        container.streams.video[0].codec_context.thread_type = "NONE"
        container.streams.video[0].codec_context.thread_count = 1
        wanted, frames, last = set(indices), [], indices[-1]
        for i, frame in enumerate(container.decode(video=0)):
            if i > last:
                break
            if i in wanted:
                frames.append(frame.to_ndarray(format="rgb24"))
    import numpy as np

    return np.stack(frames)


def timed(fn, repeats):
    """``(best wall s, best CPU s, median wall s, result)`` over ``repeats`` runs."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), statistics.median(walls), result


def main() -> None:
    """Generate (or reuse) the videos, time the three paths, print and write the figures."""
    import numpy as np
    import torch

    from energon_plugins.encoding.video.options import VideoOptions

    torch.set_num_threads(1)  # as in a loader worker (torch's DataLoader sets it there)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durations", default="10,30,60", help="seconds of each video")
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--repeats", type=int, default=3, help="best-of rounds")
    parser.add_argument("--cache", default=str(CACHE_DIR / "videos"))
    parser.add_argument("--quick", action="store_true", help="one 4 s 144p video (a smoke test)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    durations = [4] if args.quick else [int(d) for d in args.durations.split(",")]
    height = 144 if args.quick else args.height
    repeats = 1 if args.quick else args.repeats
    gops = {"2 s": 60} if args.quick else GOPS

    records, rows = [], []
    warm = cached_video(Path(args.cache), durations[0], height, next(iter(gops.values())))
    _, indices = seek_decode(warm.read_bytes(), VideoOptions(num_frames=2))  # imports, first calls
    decode_all(warm, indices, False)
    for gop_name, gop in gops.items():
        for seconds in durations:
            path = cached_video(Path(args.cache), seconds, height, gop)
            data = path.read_bytes()
            for choice, options in CHOICES.items():
                options = VideoOptions(**options)
                seek = timed(lambda: seek_decode(data, options), repeats)
                kept, indices = seek[3]
                full = timed(lambda: decode_all(path, indices, False), repeats)
                single = timed(lambda: decode_all(path, indices, True), repeats)
                if not (np.array_equal(kept, full[3]) and np.array_equal(kept, single[3])):
                    raise AssertionError(f"{path.name} {choice}: the paths kept different frames")
                record = {
                    "video": path.name,
                    "seconds": seconds,
                    "height": height,
                    "gop": gop_name,
                    "choice": choice,
                    "kept_frames": len(indices),
                    "total_frames": seconds * FPS,
                    "ms": {
                        "seek": round(seek[0] * 1000, 1),
                        "decode_all": round(full[0] * 1000, 1),
                        "decode_all_1_thread": round(single[0] * 1000, 1),
                    },
                    "cpu_ms": {
                        "seek": round(seek[1] * 1000, 1),
                        "decode_all": round(full[1] * 1000, 1),
                        "decode_all_1_thread": round(single[1] * 1000, 1),
                    },
                    "ratio_wall": round(full[0] / seek[0], 2),
                    "ratio_cpu": round(full[1] / seek[1], 2),
                    "ratio_1_thread": round(single[1] / seek[1], 2),
                }
                records.append(record)
                ms = record["ms"]
                cpu = record["cpu_ms"]
                rows.append(
                    [
                        f"{seconds} s, gop {gop_name}",
                        choice,
                        f"{len(indices)}",
                        f"{cpu['seek']:.0f}",
                        f"{cpu['decode_all_1_thread']:.0f}",
                        f"{record['ratio_1_thread']:.1f}x",
                        f"{ms['seek']:.0f}",
                        f"{ms['decode_all']:.0f}",
                        f"{record['ratio_wall']:.1f}x",
                    ]
                )
    print_table(
        f"decode time per video, {height}p {FPS} fps H.264 (best of {repeats})",
        [
            "video",
            "frames kept",
            "n",
            "seek CPU ms",
            "decode-all 1-thread CPU ms",
            "ratio (CPU)",
            "seek wall ms",
            "decode-all threads wall ms",
            "ratio (wall)",
        ],
        rows,
    )
    ratios = [r["ratio_1_thread"] for r in records]
    print(
        f"decode-all (1 thread) / seek, CPU time: median {statistics.median(ratios):.1f}x, "
        f"range {min(ratios):.1f}x to {max(ratios):.1f}x over {len(records)} cases"
    )
    figures = {
        "fps": FPS,
        "height": height,
        "repeats": repeats,
        "cases": records,
        "median_ratio_1_thread": round(statistics.median(ratios), 2),
        "median_ratio_wall": round(statistics.median(r["ratio_wall"] for r in records), 2),
        "median_ratio_cpu": round(statistics.median(r["ratio_cpu"] for r in records), 2),
    }
    if args.json:
        write_json(args.json, "video", {**figures, "summary": summary_rows(figures)})


def summary_rows(figures: dict) -> list[list]:
    """The key figures for ``run_all.py``: the median ratio, and the 8-frame and 2 fps cases."""
    rows = [
        summary_row(
            f"decode-all / seek, same kept frames ({figures['height']}p, {len(figures['cases'])} cases, "
            "median)",
            f"{figures['median_ratio_1_thread']}x (CPU, one decoder thread each; "
            f"wall against PyAV's default threads {figures['median_ratio_wall']}x)",
        )
    ]
    for case in figures["cases"]:
        if case["choice"] in ("8 frames", "2 fps"):
            rows.append(
                summary_row(
                    f"{case['seconds']} s video, gop {case['gop']}, {case['choice']}: "
                    "seek / decode-all CPU ms",
                    f"{case['cpu_ms']['seek']} / {case['cpu_ms']['decode_all_1_thread']} "
                    f"({case['ratio_1_thread']}x)",
                )
            )
    return rows


if __name__ == "__main__":
    main()
