"""``energon-plugins validate CONFIG``: every problem of a config file, each with its path."""

import click

from energon_plugins.cli._output import print_json


@click.command("validate")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a key before validating (dotted keys, YAML values); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def validate_command(config: str, sets: tuple[str, ...], as_json: bool) -> None:
    """Check CONFIG (YAML or JSON) without building anything; exit 1 listing every error."""
    from pathlib import Path

    from energon_plugins.config.load import read_config_file
    from energon_plugins.config.overrides import apply_overrides, parse_set_option
    from energon_plugins.config.validate import check_config

    data = read_config_file(config)
    data = apply_overrides(data, dict(parse_set_option(item) for item in sets))
    result, issues = check_config(data, base_dir=Path(config).expanduser().resolve().parent)
    if as_json:
        print_json({
            "config": config,
            "valid": not issues,
            "errors": [{"path": i.path, "message": i.message} for i in issues],
        })
    elif issues:
        click.echo(f"{config}: {len(issues)} error{'s' * (len(issues) != 1)}", err=True)
        for issue in issues:
            click.echo(f"  {issue.path}: {issue.message}", err=True)
    else:
        assert result is not None
        packing = result.packing.name if result.packing else "no packing"
        click.echo(
            f"{config}: valid (task_encoder {result.task_encoder.name!r}, image_processor "
            f"{result.image_processor.name!r}, {packing}, seq_length {result.seq_length})"
        )
    if issues:
        raise SystemExit(1)
