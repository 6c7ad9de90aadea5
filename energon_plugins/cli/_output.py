"""Shared output helpers for the verbs: a rich console (stdout) and JSON printing."""

import json
import sys
from typing import Any


def console(stderr: bool = False) -> Any:
    """A rich console on stdout (or stderr); imported on first use."""
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=False, highlight=False)


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, shortened to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
