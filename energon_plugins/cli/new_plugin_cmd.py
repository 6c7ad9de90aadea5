"""``energon-plugins new-plugin NAME --kind KIND [--output DIR]``: write a plugin distribution."""

import shlex
import sys
from pathlib import Path

import click

KIND_CHOICES = [
    "task-encoder",
    "image-processor",
    "packing-strategy",
    "batch-format",
    "source-format",
    "task_encoder",
    "image_processor",
    "packing_strategy",
    "batch_format",
    "source_format",
]


@click.command("new-plugin")
@click.argument("name")
@click.option(
    "--kind",
    "kind",
    type=click.Choice(KIND_CHOICES, case_sensitive=False),
    default="task-encoder",
    show_default=True,
    help="What the plugin provides.",
)
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Path(path_type=Path),
    default=Path("."),
    show_default=True,
    help="The folder to create energon-plugin-NAME in.",
)
@click.option(
    "--description",
    "summary",
    default=None,
    help="One line describing the plugin (shown by `energon-plugins list`).",
)
def new_plugin_command(name: str, kind: str, output: Path, summary: str | None) -> None:
    """Write the plugin distribution energon-plugin-NAME, ready to `pip install -e`.

    --kind picks a task encoder, an image processor, a packing strategy, a batch format or a
    source format (a reader for `convert --from`); each comes with a working example.

    It holds pyproject.toml with the entry point, the package energon_plugin_NAME (hook
    module, pydantic options, a working example component), a README with a config example,
    and tests that use energon_plugins.testing. An existing folder is never overwritten.
    """
    from energon_plugins.scaffold import ScaffoldError, write_plugin

    try:
        target = write_plugin(name, kind, output, summary=summary)
    except ScaffoldError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Wrote {target}")
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        click.echo(f"  {path.relative_to(target)}")
    # This interpreter's pip: a bare `pip` may belong to another environment than the one
    # energon-plugins (and torch) are installed in.
    python = shlex.quote(sys.executable)
    here = shlex.quote(str(target))
    click.echo("Next, in the environment energon-plugins runs in:")
    click.echo(f"  {python} -m pip install -e {shlex.quote(str(target) + '[test]')}")
    click.echo(f"  energon-plugins list          # shows {name}")
    click.echo(f"  cd {here} && {python} -m pytest   # conformance check and the example test")
