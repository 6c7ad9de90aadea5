"""How ``convert`` reads JSON records with a very long string, and a very deep one.

Run: ``python benchmarks/convert/convert_long_records.py [--sizes 32,64,128] [--old] [--json out.json]``.

For each size (MiB), one record whose answer is a string that long is written as a JSON array
(``[{...}]``) and as JSON Lines; the figure is the CPU seconds to read it the way ``convert`` does
(:func:`~energon_plugins.convert.formats.json_stream.iter_json_records`, then
``decode_payload``, the record cap raised to fit), best of ``--repeats``. Reading is linear
when the time doubles with the size (ratio ~2 per doubling; quadratic: ~4). ``--old`` also
times what ``convert`` did before: ijson's ``items`` on the array (the yajl2_c backend), whose
lexer re-reads a token that spans its 64 KiB buffer from the token's start at every new chunk.

Then a 2 MB record nested 10^6 arrays deep, between two small ones: the seconds and the
traced memory peak (``tracemalloc``) of reading all three (the deep one is rejected as
``too_deep``; ijson took over 8 GB on it and ended in a MemoryError).
"""

import argparse
import json
import math
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _shared.common import print_table, summary_row, write_json

BENCHMARK = {
    "name": "convert_long_records",
    "full": [],
    "quick": ["--sizes", "4,8", "--repeats", "1"],
    "output": "file",
}

LINEAR_GOAL = 3.0
"""Most the reading time may grow per doubling of the string (linear: 2, quadratic: 4)."""


def read_all(path: Path, **caps) -> int:
    """Records read from ``path`` the way convert reads them (rejected ones counted too)."""
    from energon_plugins.convert.formats.json_stream import decode_payload, iter_json_records
    from energon_plugins.convert.records import RecordError

    count = 0
    for _, payload in iter_json_records(path, path.name, **caps):
        try:
            decode_payload(payload)
        except RecordError:
            pass
        count += 1
    return count


def read_with_ijson(path: Path) -> int:
    """Records ijson's ``items`` gives (the old reader of JSON arrays)."""
    import ijson

    with path.open("rb") as fh:
        return sum(1 for _ in ijson.items(fh, "item", use_float=True))


def best_of(repeats: int, fn, *args, **kwargs) -> float:
    """The least of ``repeats`` CPU times (this process) of ``fn(*args, **kwargs)``: the work
    done, whatever else the machine runs."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn(*args, **kwargs)
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    """Write the inputs, time them, print the tables and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="32,64,128", help="String lengths in MiB.")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--old", action="store_true", help="Also time ijson (slow: 60 s at 128).")
    parser.add_argument("--json", default=None, help="Write the figures here.")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows, figures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            record = json.dumps(
                {
                    "id": "long",
                    "conversations": [
                        {"from": "human", "value": "<image>\nTell me everything."},
                        {"from": "gpt", "value": "a" * (size * 2**20)},
                    ],
                }
            )
            array, lines = Path(tmp) / f"long{size}.json", Path(tmp) / f"long{size}.jsonl"
            array.write_text(f"[{record}]")
            lines.write_text(record + "\n")
            caps = {"max_record_bytes": 2 * len(record)}
            figure = {
                "mib": size,
                "array_s": round(best_of(args.repeats, read_all, array, **caps), 3),
                "jsonl_s": round(best_of(args.repeats, read_all, lines, **caps), 3),
            }
            if args.old:
                figure["ijson_array_s"] = round(best_of(1, read_with_ijson, array), 3)
            figures.append(figure)
            array.unlink()
            lines.unlink()
        for previous, figure in zip([None, *figures[:-1]], figures, strict=True):
            growth = (
                ""
                if previous is None
                else f"{figure['array_s'] / max(previous['array_s'], 1e-9):.2f} / "
                f"{figure['jsonl_s'] / max(previous['jsonl_s'], 1e-9):.2f}"
            )
            rows.append(
                [
                    figure["mib"],
                    figure["array_s"],
                    figure["jsonl_s"],
                    growth,
                    figure.get("ijson_array_s", "-"),
                ]
            )
        print_table(
            f"one record with a long string (CPU seconds, best of {args.repeats})",
            ["MiB", "array", "JSON Lines", "growth (array / lines)", "ijson array (old)"],
            rows,
        )
        deep = Path(tmp) / "deep.json"
        deep.write_text('[{"n": 1}, {"deep": ' + "[" * 10**6 + "]" * 10**6 + '}, {"n": 2}]')
        tracemalloc.start()
        start = time.perf_counter()
        count = read_all(deep)
        deep_s = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    deep_figure = {"records": count, "seconds": round(deep_s, 3), "peak_mb": round(peak / 1e6, 1)}
    print_table(
        "a record nested 10^6 deep (rejected as too_deep)",
        ["records", "seconds", "peak MB"],
        [[count, deep_figure["seconds"], deep_figure["peak_mb"]]],
    )
    if args.json:
        result = {"long_string": figures, "deep": deep_figure}
        write_json(args.json, "convert_long_records", {**result, "summary": summary_rows(result)})


def growth_per_doubling(small: dict, large: dict, key: str) -> float:
    """How much the time ``key`` grows per doubling of the size between two figures."""
    ratio = large[key] / max(small[key], 1e-9)
    return round(ratio ** (math.log(2) / math.log(large["mib"] / small["mib"])), 2)


def summary_rows(result: dict) -> list[list]:
    """The key figures for ``run_all.py``: seconds per size, the growth between the two largest
    sizes (goal: linear), and the deep record's seconds and memory."""
    sizes = result["long_string"]
    rows = [
        summary_row(
            f"one record with a {figure['mib']} MiB string: CPU s, array / JSON Lines",
            f"{figure['array_s']} / {figure['jsonl_s']}",
        )
        for figure in sizes
    ]
    if len(sizes) >= 2:
        small, large = sizes[-2], sizes[-1]
        array, lines = (growth_per_doubling(small, large, key) for key in ("array_s", "jsonl_s"))
        rows.append(
            summary_row(
                f"reading time per doubling of the string ({small['mib']} -> {large['mib']} MiB), "
                "array / JSON Lines",
                f"{array}x / {lines}x",
                f"<= {LINEAR_GOAL}x (linear 2x, quadratic 4x)",
                max(array, lines) <= LINEAR_GOAL,
            )
        )
    deep = result["deep"]
    rows.append(
        summary_row(
            "a record nested 10^6 deep between two small ones: records read, s, traced peak MB",
            f"{deep['records']}, {deep['seconds']} s, {deep['peak_mb']} MB",
        )
    )
    return rows


if __name__ == "__main__":
    main()
