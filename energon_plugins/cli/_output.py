"""Shared output helpers for the verbs: a rich console (stdout), JSON printing, and the
start-up status (a spinner on stderr while a verb imports torch and builds its loader)."""

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

PIPE_WIDTH = 140
"""Width of tables written to a pipe or file (a terminal's own width is used otherwise)."""


def output_width(stream: Any = None) -> int | None:
    """The width to lay out text for ``stream`` (stdout): None for a terminal (its own width),
    else ``$COLUMNS`` or :data:`PIPE_WIDTH` (a ``$COLUMNS`` that is not a positive number is
    ignored, as rich and the shells ignore it)."""
    import os

    stream = sys.stdout if stream is None else stream
    if hasattr(stream, "isatty") and stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and 0 < int(columns) <= 100_000 else PIPE_WIDTH


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


SPINNER = "dots"
"""The rich spinner of :func:`startup_status`."""


class _NoStatus:
    """The stand-in for a status where stderr is not a terminal: every call does nothing."""

    def update(self, message: str) -> None:
        """Do nothing (nobody watches a pipe)."""

    def stop(self) -> None:
        """Do nothing."""


def stream_is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (``isatty()``)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextlib.contextmanager
def startup_status(message: str, stream: Any = None) -> Iterator[Any]:
    """A rich spinner showing ``message`` on stderr for the duration of the block.

    Yields the status: ``status.update("building the loader...")`` says what the verb does
    now, ``status.stop()`` removes it early (before the verb prints its own output). The line
    is transient: it is gone once the block ends. Only when ``stream`` (default: stderr) is a
    terminal; on a pipe or a file nothing is written (a normal run prints only what the user
    asked for) and the yielded object ignores every call. Start it before the heavy imports:
    rich costs a few tens of milliseconds, torch and Energon seconds.
    """
    stream = sys.stderr if stream is None else stream
    if not stream_is_terminal(stream):
        yield _NoStatus()
        return
    from rich.console import Console
    from rich.text import Text

    with Console(file=stream, highlight=False).status(Text(message), spinner=SPINNER) as status:
        plain = _PlainStatus(status)
        plain.update(message)  # drawn now: rich's own first frame waits for its refresh thread
        yield plain


class _PlainStatus:
    """A rich ``Status`` whose messages are plain text (a path with ``[...]`` is no markup)."""

    def __init__(self, status: Any) -> None:
        self._status = status

    def update(self, message: str) -> None:
        """Show ``message`` beside the spinner (drawn at once)."""
        from rich.text import Text

        # naming the spinner makes rich redraw now, not at its refresh thread's next tick
        self._status.update(Text(message), spinner=SPINNER)

    def stop(self) -> None:
        """Remove the spinner now (leaving the block later is then a no-op)."""
        self._status.stop()
