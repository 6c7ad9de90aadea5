"""Shared output helpers for the verbs: a rich console (stdout) and JSON printing."""

import sys
from typing import Any


PIPE_WIDTH = 140
"""Width of tables written to a pipe or file (a terminal's own width is used otherwise)."""


def output_width(stream: Any = None) -> int | None:
    """The width to lay out text for ``stream`` (stdout): None for a terminal (its own width),
    else ``$COLUMNS`` or :data:`PIPE_WIDTH`."""
    import os

    stream = sys.stdout if stream is None else stream
    if hasattr(stream, "isatty") and stream.isatty():
        return None
    return int(os.environ.get("COLUMNS", "0") or 0) or PIPE_WIDTH


def console(stderr: bool = False) -> Any:
    """A rich console on stdout (or stderr); imported on first use.

    Written to a pipe or a file (not a terminal), lines may be up to :data:`PIPE_WIDTH`
    characters (or ``$COLUMNS``), so tables are not squeezed to 80 columns.
    """
    from rich.console import Console

    width = output_width(sys.stderr if stderr else sys.stdout)
    return Console(stderr=stderr, soft_wrap=False, highlight=False, width=width)


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout."""
    import json

    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, shortened to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


KNOWN_NOISE = (
    r".*Transformer Engine and Apex are not installed.*",
    r".*'pin_memory' argument is set as true but no accelerator is found.*",
)
"""Warnings that say nothing about the user's config on a CPU-only machine (hidden by the
verbs that build loaders; ``--debug`` keeps them)."""


def quiet_known_warnings() -> None:
    """Hide :data:`KNOWN_NOISE` warnings for the rest of this process."""
    import warnings

    for pattern in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=pattern)
