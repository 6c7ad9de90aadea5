"""The click group and the entry point; each verb lives in its own module.

Verbs are imported only when invoked (:class:`LazyGroup`), so ``energon-plugins list`` pays
for nothing but the registry; heavy modules (torch, transformers, Energon) are imported inside
the verbs that build components (``preview``, ``bench``, ``demo``).

A user error (:class:`energon_plugins.errors.EnergonPluginsError`, a missing file, bad YAML)
ends the program with exit code 1 and a short message on stderr; ``--debug`` shows the
traceback instead.
"""

import importlib
import importlib.util
import sys
from typing import Any

import click

COMMANDS: dict[str, str] = {
    "list": "energon_plugins.cli.list_cmd:list_command",
    "show": "energon_plugins.cli.show_cmd:show_command",
    "validate": "energon_plugins.cli.validate_cmd:validate_command",
    "schema": "energon_plugins.cli.schema_cmd:schema_command",
    "preview": "energon_plugins.cli.preview_cmd:preview_command",
    "bench": "energon_plugins.cli.bench_cmd:bench_command",
    "blend": "energon_plugins.cli.blend_cmd:blend_command",
    "demo": "energon_plugins.cli.demo_cmd:demo_command",
    "new-plugin": "energon_plugins.cli.new_plugin_cmd:new_plugin_command",
    "convert": "energon_plugins.cli.convert_cmd:convert_command",
    "checkpoint": "energon_plugins.cli.checkpoint_cmd:checkpoint_command",
}
"""Verb name -> ``"module:attr"`` of its click command. A verb whose module is absent is hidden."""

EXIT_USER_ERROR = 1


def _command_exists(target: str) -> bool:
    module = target.partition(":")[0]
    return importlib.util.find_spec(module) is not None


class LazyGroup(click.Group):
    """A click group that imports a verb's module only when the verb is used (or listed in help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The verbs whose modules are installed, in :data:`COMMANDS` order."""
        return [name for name, target in COMMANDS.items() if _command_exists(target)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import and return the verb ``cmd_name`` (``None`` if unknown)."""
        target = COMMANDS.get(cmd_name)
        if target is None or not _command_exists(target):
            return None
        module_name, _, attr = target.partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """Resolve the verb, suggesting the closest one for a typo."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            from energon_plugins._suggest import did_you_mean

            ctx.fail(
                f"no such command {name!r}{did_you_mean(name, self.list_commands(ctx))}. "
                f"Commands: {', '.join(self.list_commands(ctx))}."
            )
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the verb; turn user errors into a message and exit code 1 unless ``--debug``."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:
            debug = bool((ctx.obj or {}).get("debug"))
            if debug or not is_user_error(exc):
                raise
            report_error(exc)
            ctx.exit(EXIT_USER_ERROR)


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a mistake in the input (config, file, name) rather than a bug."""
    from energon_plugins.errors import EnergonPluginsError

    if isinstance(exc, (EnergonPluginsError, FileNotFoundError, IsADirectoryError, PermissionError)):
        return True
    yaml = sys.modules.get("yaml")
    if yaml is not None and isinstance(exc, yaml.YAMLError):
        return True
    # Energon gives up after too many failing samples in a row; with a config that cannot
    # encode anything (e.g. a seq_length shorter than the image tokens) that is the user's
    # setting, and the message names the reason and the sample.
    energon_errors = sys.modules.get("megatron.energon.errors")
    fatal = getattr(energon_errors, "FatalSampleError", None)
    return fatal is not None and isinstance(exc, fatal)


def report_error(exc: BaseException) -> None:
    """Print ``exc`` as ``Error: ...`` on stderr, with a hint about ``--debug``.

    A sample that stopped an Energon loader prints as one line naming the sample, the stage
    and the reason, and a loader worker's error that arrives as torch's re-raised text
    (``Caught X in DataLoader worker process N`` and the worker's whole traceback) as its own
    message only. The project's loaders already raise such errors; this is the net under
    Energon loaders built elsewhere (``validate --deep`` reads samples with Energon's own).
    """
    text = str(exc).strip() or type(exc).__name__
    energon_errors = sys.modules.get("megatron.energon.errors")
    fatal = getattr(energon_errors, "FatalSampleError", None)
    if "in DataLoader worker process" in text or (fatal is not None and isinstance(exc, fatal)):
        # torch and Energon are imported already: a loader raised this
        from energon_plugins.loading.sample_failures import readable_error, worker_message

        clear = readable_error(exc)
        text = str(clear) if clear is not None else (worker_message(text) or text)
    click.echo(f"Error: {text}", err=True)
    click.echo("(run with --debug for the traceback)", err=True)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="energon-plugins", prog_name="energon-plugins")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Find, check and run Megatron-Energon task-encoder plugins."""
    ctx.ensure_object(dict)["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    """Run the command line (console script ``energon-plugins``)."""
    cli.main(args=argv, prog_name="energon-plugins")
