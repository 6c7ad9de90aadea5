"""The ``energon-plugins`` command line."""

from energon_plugins.cli.main import cli, main

__all__ = ["cli", "main"]
