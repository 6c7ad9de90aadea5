"""``energon-plugins bench CONFIG [--batches N] [--json]``: loader throughput of a config.

Builds the datamodule from CONFIG (with its worker count), takes one warm-up batch (worker
start-up and first shard open are not counted), then times N batches of the training loader
behind a rich progress bar and prints samples/s, tokens/s, the padding fraction, the samples
skipped by reason (corrupt image or JSON, missing field, truncated shard, encoder skips) and,
with packing, the fill ratio (real tokens / (rows x seq_length)) and, with a ``cache_pool``, the
cache's hit rate over the timed batches (media reads served from the local copy, and the most
bytes it held against its cap). For a blend (a metadataset with ``blend:`` weights), a second
table sets each source's configured share beside its realised shares of the samples, tokens and
loss tokens read, warm-up batch included (``mix`` in ``--json``; ``None`` for a plain
dataset). The statistics are read from
the task encoder's batches, so the config's ``batch_format`` is left out (it costs under 2% of
the loader's time: ``benchmarks/throughput/batch_formats.py``). After a run with ``num_workers: 0`` a
one-line hint says so (the pipeline then runs in the training process, between its steps
rather than beside them); ``--json`` lists it under ``hints``. While the datamodule is built and
the loader warms up, a status on stderr names the step (only where stderr is a terminal).
"""

import time
from typing import Any

import click

from energon_plugins.cli._config_options import datamodule_for, set_option

ZERO_WORKERS_HINT = (
    "num_workers: 0 loads in the training process; try num_workers: 2 or more (--set num_workers=2)"
)
"""The line ``bench`` prints under its figures after a run with 0 workers."""


def hints(result: dict[str, Any]) -> list[str]:
    """Advice on the settings that gave ``result`` (one line each; none for a good setup)."""
    return [ZERO_WORKERS_HINT] if result.get("num_workers") == 0 else []


def warm_up(datamodule: Any) -> tuple[Any, Any, float]:
    """Build the training loader and take one batch (worker start-up, first shard open);
    return ``(loader, iterator, seconds)``."""
    loader = datamodule.train_dataloader()
    iterator = iter(loader)
    started = time.perf_counter()
    next(iterator)
    return loader, iterator, time.perf_counter() - started


def run_bench(
    datamodule: Any, batches: int, progress: Any = None, warm: tuple[Any, Any, float] | None = None
) -> dict[str, Any]:
    """Time ``batches`` training batches after one warm-up batch; return the figures.

    ``warm``: what :func:`warm_up` returned, when the caller took the warm-up batch itself.
    """
    from energon_plugins.loading.cache_pool import cache_pool_stats
    from energon_plugins.loading.mix_report import datamodule_mix
    from energon_plugins.preview.batch_view import BatchStats, batch_stats, encoder_token_ids

    _, ignore, pad_id = encoder_token_ids(datamodule)
    seq_length = datamodule.seq_length
    loader, iterator, warmup = warm if warm is not None else warm_up(datamodule)
    cache_before = cache_pool_stats(datamodule)
    totals = BatchStats()
    started = time.perf_counter()
    for _ in range(batches):
        batch = next(iterator)
        totals.add(batch_stats(batch, pad_id, ignore, seq_length))
        if progress is not None:
            progress()
    elapsed = time.perf_counter() - started
    packed = getattr(datamodule, "packing", None) is not None
    result = {
        "batches": batches,
        "seconds": round(elapsed, 4),
        "warmup_seconds": round(warmup, 4),
        "rows": totals.rows,
        "samples": totals.samples,
        "samples_per_second": round(totals.samples / elapsed, 2) if elapsed else None,
        "tokens_per_second": round(totals.real_tokens / elapsed, 1) if elapsed else None,
        "padding_fraction": round(totals.padding_fraction, 4),
        "loss_tokens": totals.loss_tokens,
        "packing": packed,
        "fill_ratio": round(totals.fill_ratio, 4) if packed else None,
        "num_workers": datamodule.num_workers,
        "micro_batch_size": datamodule.micro_batch_size,
        "seq_length": seq_length,
        "skipped": loader.skip_counts() if hasattr(loader, "skip_counts") else {},
        "cache_pool": cache_figures(cache_before, cache_pool_stats(datamodule)),
    }
    mix = datamodule_mix(datamodule)
    result["mix"] = None if mix is None else [row.as_dict() for row in mix]
    result["hints"] = hints(result)
    return result


def cache_figures(before: Any, after: Any) -> dict[str, Any] | None:
    """The cache pool's figures over the timed batches (``None`` without a cache pool): hits and
    misses of the media reads, their hit rate, and the most bytes held on disk against the cap
    (over the whole run)."""
    if after is None:
        return None
    hits = after.hits - (before.hits if before else 0)
    misses = after.misses - (before.misses if before else 0)
    reads = hits + misses
    return {
        "hits": hits,
        "misses": misses,
        "hit_rate": round(hits / reads, 4) if reads else None,
        "cached_bytes": after.cached_bytes,
        "peak_bytes": after.peak_bytes,
        "cap_bytes": after.cap_bytes,
    }


def cache_line(figures: dict[str, Any]) -> str:
    """The table's cache pool row: ``92.0% (23 of 25 media reads; at most 1.2 MiB of 4.0 GiB held)``."""
    reads = figures["hits"] + figures["misses"]
    held = f"at most {_size(figures['peak_bytes'])} of {_size(figures['cap_bytes'])} held"
    if not reads:
        return f"no media read through the cache ({held})"
    return f"{figures['hit_rate']:.1%} ({figures['hits']} of {reads} media reads; {held})"


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - the loop returns


@click.command("bench")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--batches",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Batches to time (after one warm-up batch).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON only.")
@set_option()
def bench_command(config: str, batches: int, as_json: bool, sets: tuple[str, ...]) -> None:
    """Measure the training loader of CONFIG: samples/s, tokens/s, padding, fill ratio."""
    from energon_plugins.cli._output import print_json, startup_status

    with startup_status(f"checking {config}...") as status:
        datamodule, _ = datamodule_for(config, sets, status)
        workers = datamodule.num_workers
        status.update(
            f"starting the loader ({workers} worker{'s' * (workers != 1)}) and reading a warm-up batch..."
        )
        warm = warm_up(datamodule)
    if as_json:
        print_json(run_bench(datamodule, batches, warm=warm))
        return

    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    from rich.table import Table

    from energon_plugins.cli._output import console

    out = console()
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as bar:
        task = bar.add_task("batches", total=batches)
        result = run_bench(datamodule, batches, progress=lambda: bar.advance(task), warm=warm)
    table = Table(title=f"bench {config}", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("batches (rows)", f"{result['batches']} ({result['rows']})"),
        ("samples", str(result["samples"])),
        ("time (s)", f"{result['seconds']:.3f} (+{result['warmup_seconds']:.3f} warm-up)"),
        ("samples/s", f"{result['samples_per_second']:.1f}"),
        ("tokens/s", f"{result['tokens_per_second']:.0f}"),
        ("padding fraction", f"{result['padding_fraction']:.1%}"),
    ]
    if result["packing"]:
        rows.append(("fill ratio", f"{result['fill_ratio']:.1%}"))
    skipped = result["skipped"]
    rows.append(("skipped samples", ", ".join(f"{k} {v}" for k, v in skipped.items()) or "0"))
    if result["cache_pool"] is not None:
        rows.append(("cache pool hit rate", cache_line(result["cache_pool"])))
    rows.append(
        (
            "workers / micro batch / seq_length",
            f"{result['num_workers']} / {result['micro_batch_size']} / {result['seq_length']}",
        )
    )
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    if result["mix"] is not None:
        from energon_plugins.loading.mix_report import MixRow
        from energon_plugins.preview.mix_view import mix_table

        out.print(mix_table([MixRow(**row) for row in result["mix"]], " (the warm-up batch too)"))
    for hint in result["hints"]:
        out.print(f"[yellow]hint:[/yellow] {escape(hint)}", soft_wrap=True)  # one line
