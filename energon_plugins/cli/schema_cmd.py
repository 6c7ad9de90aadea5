"""``energon-plugins schema [--output FILE]``: the config's JSON Schema for editors."""

import json

import click


@click.command("schema")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the schema to FILE instead of stdout.",
)
def schema_command(output: str | None) -> None:
    """Print the JSON Schema of config files, with every installed plugin's options."""
    from energon_plugins.config.schema import config_json_schema

    text = json.dumps(config_json_schema(), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    Path(output).write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}", err=True)
