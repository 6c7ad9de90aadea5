"""The click group and the entry point; each verb lives in its own module."""

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Find, check and run Megatron-Energon task-encoder plugins."""
    ctx.ensure_object(dict)["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    """Run the command line (console script ``energon-plugins``)."""
    cli.main(args=argv, prog_name="energon-plugins")
