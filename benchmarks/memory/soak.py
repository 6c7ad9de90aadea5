"""Soak: does a loader process grow over a long run? The datamodule against a plain Energon loader.

Run: ``python benchmarks/memory/soak.py [--batches 100000] [--baseline-batches N]
[--workers 0 2] [--every N] [--warmup N] [--json FILE]``.

Each loader runs in its own process (so one's heap does not blur another's) over a small VQA
dataset (60 samples of 16x16 PNGs, 5 per shard: 9 training shards), with a cheap batch: micro
batch 1, sequence 48, a 14 px CLIP crop (one image token). Every ``--every`` batches it samples
the resident set (``psutil``, else ``/proc``) of the main process and of each loader worker,
and fits the growth per 100,000 batches by least squares over the samples after ``--warmup``
batches (the heap, the buffers and the pages a forked worker touches settle first).

- **datamodule**: ``EnergonMultiModalDataModule(...).train_dataloader()`` with the default
  batch format, ``--batches`` batches at each ``--workers`` count. Goal: every process grows
  by less than 1 MB per 100,000 batches.
- **Energon**: ``get_train_dataset`` + ``get_savable_loader`` over the same dataset, with the
  datamodule's task encoder, shuffle buffer and worker count, ``--baseline-batches`` batches
  (default: ``--batches``, at most 20,000: its growth is linear from the start, far above the
  goal, and the slope of 20,000 batches is already steady). No goal: the reference.

Energon 7.4.1's open tar files keep every header they parse (``TarFile.members``, about 1.8 KB
per sample read); the datamodule bounds them (``energon_plugins.loading.tar_members``). At 0
workers the number of headers held is recorded too (``tar_headers``).

Self-contained: imports nothing from the other benchmark scripts or their helpers.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARK = {
    "name": "soak",
    "full": ["--batches", "100000"],
    "quick": ["--batches", "2000"],
    "output": "file",
}

GOAL_MB = 1.0
"""Most resident-set growth per 100,000 batches allowed to the datamodule's processes."""
PER = 100_000
"""The growth is reported per this many batches."""
BASELINE_CAP = 20_000
"""Default most batches of the plain Energon loader (see the module docstring)."""
CACHE = Path(__file__).resolve().parents[1] / "results" / ".cache" / "soak"
LOADERS = ("datamodule", "energon")
SEQ_LENGTH = 48
MICRO_BATCH = 1


# ---------------------------------------------------------------- one loader, in a child process


def rss_mb(pid: int) -> float | None:
    """Resident set of process ``pid`` in MiB (``psutil``, else ``/proc``); None when gone."""
    try:
        import psutil
    except ImportError:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None
    try:
        return psutil.Process(pid).memory_info().rss / (1024 * 1024)
    except psutil.Error:
        return None


def child_pids() -> list[int]:
    """This process's children (the loader's workers), oldest first."""
    try:
        import psutil

        return sorted(child.pid for child in psutil.Process().children())
    except ImportError:
        pid = os.getpid()
        try:
            return sorted(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
        except OSError:
            return []


def write_soak_dataset(root: Path) -> Path:
    """The soak's dataset under ``root`` (written once, reused while its arguments match)."""
    from energon_plugins.synthetic import write_dataset

    info = write_dataset(root / "vqa", kind="vqa", num_samples=60, samples_per_shard=5, image_size=(16, 16))
    return Path(info.path)


def build_loader(loader: str, path: Path, workers: int) -> tuple[Any, Any]:
    """``(loader, its Energon dataset)``: the datamodule's training loader or a plain Energon one."""
    import transformers

    import energon_plugins
    from energon_plugins.synthetic import build_demo_tokenizer

    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 14}, crop_size={"height": 14, "width": 14}
    )
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path),
        build_demo_tokenizer(),
        processor,
        seq_length=SEQ_LENGTH,
        micro_batch_size=MICRO_BATCH,
        num_workers=workers,
        task_encoder={"name": "multimodal", "options": {"image_tokens": 1}},
    )
    if loader == "datamodule":
        wrapper = dm.train_dataloader()
        return wrapper, wrapper.dataloader.dataset
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    dataset = get_train_dataset(
        str(path),
        split_part="train",
        batch_size=MICRO_BATCH,
        task_encoder=dm.task_encoder,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers),
        shuffle_buffer_size=dm.shuffle_buffer_size,
        max_samples_per_sequence=dm.max_samples_per_sequence,
    )
    plain = get_savable_loader(dataset)
    return plain, plain.dataset


def soak_one(loader: str, path: Path, workers: int, batches: int, every: int) -> dict[str, Any]:
    """Run ``batches`` batches of one loader; the resident sets every ``every`` batches."""
    import warnings

    import torch
    import torch.utils.data._utils as data_utils

    from energon_plugins.loading.tar_members import kept_headers

    data_utils.MP_STATUS_CHECK_INTERVAL = 0.1  # a quick exit of the workers at the end
    torch.set_num_threads(1)  # as in Energon's workers: per-sample tensor work is tiny
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    built, dataset = build_loader(loader, path, workers)
    iterator = iter(built)
    series = []
    start = time.perf_counter()
    for index in range(1, batches + 1):
        next(iterator)
        if index % every == 0 or index in (1, batches):
            point: dict[str, Any] = {
                "batch": index,
                "seconds": round(time.perf_counter() - start, 2),
                "main_mb": rss_mb(os.getpid()),
                "workers_mb": [rss_mb(pid) for pid in child_pids()],
            }
            if workers == 0:
                point["tar_headers"] = kept_headers(dataset)
            series.append(point)
    seconds = time.perf_counter() - start
    return {
        "loader": loader,
        "workers": workers,
        "batches": batches,
        "seconds": round(seconds, 1),
        "series": series,
    }


# ---------------------------------------------------------------- the parent: runs, fits, reports


def growth_per_batches(points: list[tuple[int, float]], warmup: int) -> float | None:
    """Least-squares slope of ``(batch, MiB)`` after ``warmup`` batches, in MiB per :data:`PER`."""
    kept = [(b, mb) for b, mb in points if b >= warmup and mb is not None]
    if len({b for b, _ in kept}) < 2:
        return None
    slope, _ = statistics.linear_regression([b for b, _ in kept], [mb for _, mb in kept])
    return slope * PER


def fit(run: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Growth per :data:`PER` batches of the main process and of each worker of one run."""
    series = run["series"]
    main = [(p["batch"], p["main_mb"]) for p in series]
    n_workers = max((len(p["workers_mb"]) for p in series), default=0)
    workers = []
    for w in range(n_workers):
        points = [(p["batch"], p["workers_mb"][w]) for p in series if len(p["workers_mb"]) == n_workers]
        workers.append(growth_per_batches(points, warmup))
    headers = [p["tar_headers"] for p in series if "tar_headers" in p]
    return {
        "main_growth_mb": growth_per_batches(main, warmup),
        "worker_growth_mb": workers,
        "main_mb_start_end": [series[0]["main_mb"], series[-1]["main_mb"]],
        "tar_headers_start_end": [headers[0], headers[-1]] if headers else None,
        "batches_per_s": round(run["batches"] / run["seconds"], 1) if run["seconds"] else None,
    }


def run_child(loader: str, path: Path, workers: int, batches: int, every: int) -> dict[str, Any]:
    """Run one loader in a fresh process (this script with ``--child``) and read its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", loader, "--data", str(path)]
        cmd += [
            "--workers",
            str(workers),
            "--batches",
            str(batches),
            "--every",
            str(every),
            "--out",
            str(out),
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        subprocess.run(cmd, check=True, env=env)
        return json.loads(out.read_text())


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(runs: list[dict[str, Any]]) -> tuple[list[list[Any]], list[list[Any]]]:
    """``(table rows, summary rows)`` of the fitted runs."""
    rows, summary = [], []
    for run in runs:
        loader, workers = run["loader"], run["workers"]
        fitted = run["fit"]
        ours = loader == "datamodule"
        name = "datamodule" if ours else "plain Energon"
        processes = [("main", fitted["main_growth_mb"])]
        processes += [(f"worker {i}", g) for i, g in enumerate(fitted["worker_growth_mb"])]
        for process, growth in processes:
            met = growth is not None and growth < GOAL_MB
            rows.append(
                [
                    name,
                    workers,
                    run["batches"],
                    fitted["batches_per_s"],
                    process,
                    fmt(growth),
                    ("met" if met else "MISSED") if ours else "reference",
                ]
            )
        worst_worker = max((g for g in fitted["worker_growth_mb"] if g is not None), default=None)
        for process, growth in [("main process", fitted["main_growth_mb"]), ("worst worker", worst_worker)]:
            if process == "worst worker" and workers == 0:
                continue
            figure = f"soak: {name} {process}, {workers} workers, RSS growth per 100k batches (MB)"
            if ours:
                summary.append(
                    [figure, fmt(growth), f"< {GOAL_MB:g}", growth is not None and growth < GOAL_MB]
                )
            else:
                summary.append([figure, fmt(growth), "", None])
    return rows, summary


def print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    """``rows`` under ``columns`` as a rich table (plain text without rich)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        for row in [columns, *rows]:
            print(" | ".join(str(cell) for cell in row))
        return
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index in (0, 4) else "right")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console(width=120).print(table)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=PER, help="batches of the datamodule's loader")
    parser.add_argument(
        "--baseline-batches",
        type=int,
        default=None,
        help=f"batches of the plain Energon loader (default: --batches, at most {BASELINE_CAP}; 0: none)",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="worker counts to run")
    parser.add_argument("--every", type=int, default=None, help="sample RSS every N batches (default: 1%%)")
    parser.add_argument("--warmup", type=int, default=None, help="fit after N batches (default: 20%%)")
    parser.add_argument("--data", type=Path, default=CACHE, help="where the dataset is written once")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--child", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batches < 2 or any(w < 0 for w in args.workers):
        parser.error("--batches must be >= 2 and --workers >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run every loader and worker count, print the table, write the JSON."""
    args = parse_args(argv)
    if args.child:
        (workers,) = args.workers
        result = soak_one(args.child, args.data, workers, args.batches, args.every)
        args.out.write_text(json.dumps(result))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    baseline = min(args.batches, BASELINE_CAP) if args.baseline_batches is None else args.baseline_batches
    path = write_soak_dataset(args.data)
    runs = []
    started = time.perf_counter()
    for workers in args.workers:
        for loader, batches in (("datamodule", args.batches), ("energon", baseline)):
            if batches < 2:
                continue
            every = args.every or max(1, batches // 100)
            warmup = args.warmup if args.warmup is not None else batches // 5
            run = run_child(loader, path, workers, batches, every)
            run["every"], run["warmup"] = every, warmup
            run["fit"] = fit(run, warmup)
            print(f"{loader}, {workers} workers: {batches} batches in {run['seconds']} s", flush=True)
            runs.append(run)
    rows, summary = report(runs)
    print_table(
        f"Soak: resident-set growth per {PER:,} batches (MB), fitted after the warm-up",
        ["loader", "workers", "batches", "batches/s", "process", "growth", "goal < 1 MB"],
        rows,
    )
    for run in runs:
        headers = run["fit"]["tar_headers_start_end"]
        if headers:
            print(f"{run['loader']}, 0 workers: tar headers held {headers[0]} -> {headers[-1]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "benchmark": "soak",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "seconds": round(time.perf_counter() - started, 1),
            "settings": {
                "micro_batch_size": MICRO_BATCH,
                "seq_length": SEQ_LENGTH,
                "image_px": 16,
                "shards": 12,
            },
            "summary": summary,
            "runs": runs,
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
