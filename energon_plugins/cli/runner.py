"""Run the ``energon-plugins`` command in this process (for tests of plugins and examples)."""

from collections.abc import Mapping, Sequence

from click.testing import CliRunner, Result

from energon_plugins.cli.main import cli


def run_cli(args: Sequence[str], *, env: Mapping[str, str | None] | None = None) -> Result:
    """Run ``energon-plugins ARGS`` in-process and return click's :class:`~click.testing.Result`.

    The result carries ``exit_code``, ``output`` and ``exception``; an error is caught and
    reported there (as the command line reports it), not raised. ``env`` overrides environment
    variables for the run only.
    """
    return CliRunner().invoke(cli, list(args), env=env)
