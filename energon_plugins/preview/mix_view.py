"""The table ``bench`` and ``preview`` print after their own output for a blend: per source,
the configured share next to the realised shares of samples, tokens and loss tokens
(:func:`~energon_plugins.loading.mix_report.realised_mix`)."""

from __future__ import annotations

from typing import Any

from energon_plugins.loading.mix_report import MixRow

MIX_TITLE = "blend mix: configured vs read"
"""The title of the mix table (a plain dataset prints none)."""


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.1%}"


def mix_table(rows: list[MixRow], note: str = "") -> Any:
    """A rich ``Table`` of ``rows``: source, configured share, then the shares of the samples
    (with their count), tokens and loss tokens read; the caption says how many samples were
    read, followed by ``note``."""
    from rich.markup import escape
    from rich.table import Table

    read = sum(row.samples for row in rows)
    table = Table(
        title=MIX_TITLE,
        title_justify="left",
        caption=f"configured: the blend's weights as shares; read: {read} samples{note}",
        caption_justify="left",
    )
    table.add_column("source")
    table.add_column("configured", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("loss tokens", justify="right")
    for row in rows:
        table.add_row(
            escape(row.source),
            _percent(row.configured),
            f"{_percent(row.sample_share)} ({row.samples})",
            _percent(row.token_share),
            _percent(row.loss_token_share),
        )
    return table
