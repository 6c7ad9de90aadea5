"""Plain text columns for ``list``: the one verb whose start-up time is a goal.

Rich's table costs about 40 ms to import and lay out, more than the rest of ``list`` together;
this lays out the same columns with :mod:`textwrap`. Columns named ``folding`` give up width
(the one with the most width above its floor first) until the table fits; their cells wrap
onto more lines. The others keep their full width: plugin names are what users copy into
configs.
"""

import textwrap
from collections.abc import Callable, Sequence

GAP = "  "


def column_widths(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, folding: dict[str, int]
) -> list[int]:
    """The width of each column so that a line fits in ``width`` characters, when it can.

    ``folding`` maps the columns that may wrap to the narrowest width they may take.
    """
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    floor = [min(w, folding[h]) if h in folding else w for h, w in zip(headers, widths)]
    excess = sum(widths) + len(GAP) * (len(headers) - 1) - width
    while excess > 0:
        shrinkable = [i for i, h in enumerate(headers) if h in folding and widths[i] > floor[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i] - floor[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def render_columns(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int,
    folding: dict[str, int],
    right: frozenset[str] = frozenset(),
    style: Callable[[int, int, str], str] | None = None,
    title: str | None = None,
) -> str:
    """``rows`` under ``headers`` as aligned text no wider than ``width`` where it can be.

    Columns in ``right`` are right-aligned (numbers).

    ``style(row, column, padded_text)`` may decorate a cell (colour); it sees the padded text
    so that alignment is computed on the visible characters.
    """
    widths = column_widths(headers, rows, width, folding)
    justify = [str.rjust if h in right else str.ljust for h in headers]
    lines = [title] if title else []

    def emit(cells: Sequence[str], row: int | None) -> None:
        wrapped = [
            textwrap.wrap(c, w, break_long_words=True, break_on_hyphens=True) or [""] if len(c) > w else [c]
            for c, w in zip(cells, widths)
        ]
        for k in range(max(len(w) for w in wrapped)):
            parts = []
            for col, (pieces, w) in enumerate(zip(wrapped, widths)):
                text = justify[col](pieces[k] if k < len(pieces) else "", w)
                parts.append(style(row, col, text) if style and row is not None else text)
            lines.append(GAP.join(parts).rstrip())

    emit(headers, None)
    lines.append(GAP.join("-" * w for w in widths))
    for index, row in enumerate(rows):
        emit(row, index)
    return "\n".join(lines)
