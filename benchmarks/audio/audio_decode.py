"""Audio decode time and peak memory per clip: the kept window against decode-all-then-slice.

Run: ``python benchmarks/audio/audio_decode.py [--minutes 10] [--windows 5,30] [--formats
flac,mp3,m4a] [--repeats 3] [--quick] [--json FILE]``.

Long clips (10 minutes of 44.1 kHz stereo: two drifting tones over low noise, so the codecs
work as on real sound) are written once as FLAC, MP3 and M4A (AAC) by PyAV and cached under
``benchmarks/results/.cache/audio``. For each clip and each kept window (``audio.max_seconds``
with ``over_budget: clip``: the first 5 s, the first 30 s, Whisper's window), the same kept
samples are produced

- ``kept``: as the ``hf-processor`` encoder does (``ProcessorAudio.decode``, a real
  ``WhisperFeatureExtractor`` at 16 kHz): the clip's length read from the container, only the
  kept window decoded by Energon's ``AVDecoder.get_audio_clips`` (which stops at the window's
  end), then resampled once to 16 kHz mono;
- ``decode-all``: the whole clip decoded by the same ``get_audio_clips`` (window ``(0, inf)``),
  resampled to 16 kHz mono by the same libswresample call, then sliced to the kept length:
  what loading the file whole (a processor's own audio loading) and cutting it costs.

The kept samples must equal the slice: the same length, bit-identical except the last few
milliseconds (libswresample's filter flushes at the window's end where decode-all has more
input), within 1e-6 of full scale before them; the script stops otherwise. Each time is the best
of ``--repeats`` rounds, wall and CPU (process time); peak memory is ``tracemalloc``'s peak over
one call (every NumPy buffer: decoded frames, the concatenated clip, the resampled one), measured
in a separate round so that tracing does not slow the timed ones. The figures are
decode-all / kept ratios, all measured in this run; CPU time is the robust one on a busy
machine (both paths decode on one thread).
"""

import argparse
import io
import statistics
import sys
import time
import tracemalloc
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared import CACHE_DIR
from _shared.common import print_table, summary_row, write_json

BENCHMARK = {"name": "audio_decode", "full": ["--repeats", "3"], "quick": ["--quick"], "output": "file"}

SOURCE_RATE = 44100
TARGET_RATE = 16000
CODECS = {"flac": ("flac", "flac"), "mp3": ("mp3", "libmp3lame"), "m4a": ("ipod", "aac")}
"""Per format: the PyAV container format and codec."""
TAIL_MS = 5.0
"""The end of a kept window where the resampler's flush may differ from decode-all's slice."""
TOLERANCE = 1e-6
"""Largest difference allowed before the tail (full scale is 1.0)."""


def cached_clip(cache: Path, ext: str, seconds: int) -> Path:
    """The generated stereo clip (written once, reused by later runs)."""
    import av
    import numpy as np

    path = cache / f"tones-{seconds}s-{SOURCE_RATE}hz-stereo.{ext}"
    if path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".part.{ext}")
    container, codec = CODECS[ext]
    rng = np.random.default_rng(seconds)
    with av.open(str(tmp), "w", format=container) as out:
        stream = out.add_stream(codec, rate=SOURCE_RATE, layout="stereo")
        assert isinstance(stream, av.AudioStream)
        formats = [f.name for f in stream.codec_context.codec.audio_formats or ()]
        planar = "fltp" in formats
        sample_format = "fltp" if planar else "s16"
        step = stream.codec_context.frame_size or 4096
        for start in range(0, seconds * SOURCE_RATE, step):
            t = np.arange(start, min(start + step, seconds * SOURCE_RATE)) / SOURCE_RATE
            left = 0.3 * np.sin(2 * np.pi * (220 + 40 * np.sin(t / 7)) * t)
            right = 0.3 * np.sin(2 * np.pi * (330 + 60 * np.sin(t / 11)) * t)
            chunk = np.stack([left, right]) + 0.02 * rng.standard_normal((2, len(t)))
            if planar:
                frame = av.AudioFrame.from_ndarray(chunk.astype(np.float32), format="fltp", layout="stereo")
            else:  # packed 16-bit: (1, samples * channels), interleaved
                packed = (chunk.T.reshape(1, -1) * 32767).astype(np.int16)
                frame = av.AudioFrame.from_ndarray(packed, format=sample_format, layout="stereo")
            frame.sample_rate = SOURCE_RATE
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    tmp.rename(path)
    return path


def processor_audio(window: float):
    """The encoder's audio side for a 16 kHz Whisper feature extractor, keeping the first
    ``window`` seconds of a sample (``audio.max_seconds``, ``over_budget: clip``)."""
    from energon_plugin_hf_processor.audio import ProcessorAudio
    from energon_plugin_hf_processor.audio_options import AudioOptions
    from transformers import WhisperFeatureExtractor

    processor = types.SimpleNamespace(feature_extractor=WhisperFeatureExtractor(sampling_rate=TARGET_RATE))
    return ProcessorAudio(processor, AudioOptions(max_seconds=window, over_budget="clip"))


def kept_path(audio, data: bytes):
    """The encoder's path: length from the container, the kept window decoded, resampled once."""
    (decoded,) = audio.decode(types.SimpleNamespace(__key__="bench"), [(data, "'bench.0.audio'")])
    return decoded.waveform


def decode_all_path(data: bytes, kept_samples: int):
    """The whole clip decoded, resampled, then sliced to the kept length."""
    from energon_plugin_hf_processor.audio import resample, to_mono_float
    from megatron.energon.av import AVDecoder

    decoder = AVDecoder(io.BytesIO(data))
    rate = decoder.get_audio_samples_per_second()
    clips, _ = decoder.get_audio_clips([(0.0, float("inf"))], audio_unit="seconds")
    return resample(to_mono_float(clips[0].numpy()), int(rate), TARGET_RATE)[:kept_samples]


def timed(fn, repeats):
    """``(best wall s, best CPU s, result)`` over ``repeats`` runs."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def peak_bytes(fn) -> int:
    """``tracemalloc``'s peak over one call of ``fn`` (NumPy buffers included)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def check_equal(name: str, kept, full) -> float:
    """Stop unless the kept samples equal decode-all's slice (see the module docstring); return
    the largest difference over the whole window."""
    import numpy as np

    if kept.shape != full.shape:
        raise AssertionError(f"{name}: kept {kept.shape} samples, decode-all's slice {full.shape}")
    body = len(kept) - int(TAIL_MS * TARGET_RATE / 1000)
    head = float(np.abs(kept[:body] - full[:body]).max(initial=0.0))
    if head > TOLERANCE:
        raise AssertionError(f"{name}: kept samples differ from decode-all's by {head:.3g} before the tail")
    return float(np.abs(kept - full).max(initial=0.0))


def main() -> None:
    """Generate (or reuse) the clips, time and trace both paths, print and write the figures."""
    import torch

    torch.set_num_threads(1)  # as in a loader worker
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each clip")
    parser.add_argument("--windows", default="5,30", help="kept seconds (audio.max_seconds, clip)")
    parser.add_argument("--formats", default="flac,mp3,m4a")
    parser.add_argument("--repeats", type=int, default=3, help="best-of rounds")
    parser.add_argument("--cache", default=str(CACHE_DIR / "audio"))
    parser.add_argument("--quick", action="store_true", help="one-minute clips, one round (a smoke test)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args()
    seconds = 60 if args.quick else round(args.minutes * 60)
    repeats = 1 if args.quick else args.repeats
    windows = [float(w) for w in args.windows.split(",")]

    records, rows = [], []
    for ext in args.formats.split(","):
        data = cached_clip(Path(args.cache), ext, seconds).read_bytes()
        kept_path(processor_audio(windows[0]), data)  # imports, first calls
        for window in windows:
            audio = processor_audio(window)
            kept = timed(lambda: kept_path(audio, data), repeats)
            full = timed(lambda: decode_all_path(data, len(kept[2])), repeats)
            worst = check_equal(f"{ext} {window:g} s", kept[2], full[2])
            kept_peak = peak_bytes(lambda: kept_path(audio, data))
            full_peak = peak_bytes(lambda: decode_all_path(data, len(kept[2])))
            record = {
                "format": ext,
                "clip_s": seconds,
                "window_s": window,
                "kept_samples": len(kept[2]),
                "max_abs_diff": worst,
                "ms": {"kept": round(kept[0] * 1000, 1), "decode_all": round(full[0] * 1000, 1)},
                "cpu_ms": {"kept": round(kept[1] * 1000, 1), "decode_all": round(full[1] * 1000, 1)},
                "peak_mib": {"kept": round(kept_peak / 2**20, 2), "decode_all": round(full_peak / 2**20, 2)},
                "ratio_wall": round(full[0] / kept[0], 1),
                "ratio_cpu": round(full[1] / max(kept[1], 1e-6), 1),
                "ratio_peak": round(full_peak / kept_peak, 1),
            }
            records.append(record)
            rows.append(
                [
                    f"{ext}, {seconds / 60:g} min",
                    f"{window:g} s",
                    f"{record['ms']['kept']:.0f}",
                    f"{record['ms']['decode_all']:.0f}",
                    f"{record['ratio_wall']:.1f}x",
                    f"{record['ratio_cpu']:.1f}x",
                    f"{record['peak_mib']['kept']:.1f}",
                    f"{record['peak_mib']['decode_all']:.1f}",
                    f"{record['ratio_peak']:.1f}x",
                    f"{worst:.2g}",
                ]
            )
    print_table(
        f"audio decode per clip, {SOURCE_RATE} Hz stereo to {TARGET_RATE} Hz mono (best of {repeats})",
        [
            "clip",
            "kept",
            "kept wall ms",
            "decode-all wall ms",
            "ratio (wall)",
            "ratio (CPU)",
            "kept peak MiB",
            "decode-all peak MiB",
            "ratio (peak)",
            "max |diff|",
        ],
        rows,
    )
    figures = {
        "clip_s": seconds,
        "source_rate": SOURCE_RATE,
        "target_rate": TARGET_RATE,
        "repeats": repeats,
        "cases": records,
        "median_ratio_wall": round(statistics.median(r["ratio_wall"] for r in records), 1),
        "median_ratio_cpu": round(statistics.median(r["ratio_cpu"] for r in records), 1),
        "median_ratio_peak": round(statistics.median(r["ratio_peak"] for r in records), 1),
    }
    print(
        f"decode-all / kept: CPU median {figures['median_ratio_cpu']}x, wall {figures['median_ratio_wall']}x, "
        f"peak memory median {figures['median_ratio_peak']}x over {len(records)} cases"
    )
    if args.json:
        write_json(args.json, "audio_decode", {**figures, "summary": summary_rows(figures)})


def summary_rows(figures: dict) -> list[list]:
    """The key figures for ``run_all.py``: the median ratios, then each case."""
    rows = [
        summary_row(
            f"decode-all-then-slice / kept window, {figures['clip_s'] / 60:g} min clips (median)",
            f"{figures['median_ratio_cpu']}x CPU ({figures['median_ratio_wall']}x wall), "
            f"{figures['median_ratio_peak']}x peak memory",
        )
    ]
    for case in figures["cases"]:
        rows.append(
            summary_row(
                f"{case['format']}, first {case['window_s']:g} s kept: kept / decode-all",
                f"{case['cpu_ms']['kept']} / {case['cpu_ms']['decode_all']} CPU ms ({case['ratio_cpu']}x), "
                f"{case['peak_mib']['kept']} / {case['peak_mib']['decode_all']} MiB ({case['ratio_peak']}x)",
            )
        )
    return rows


if __name__ == "__main__":
    main()
