"""``energon-plugins validate CONFIG``: every problem of a config file, each with its path.

First the config itself (keys, types, plugin names and options, paths, the rules between
keys: import-light). When that passes, what the run would open: the tokenizer, the image
processor, the packing strategy, the task encoders (image token, ``seq_length`` against one
image) and the dataset's metadata (the encoder can read its sample type); with ``--deep`` the
first samples too. ``--quick`` stops after the config itself.
"""

import click

from energon_plugins.cli._output import print_json


@click.command("validate")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a key before validating (dotted keys, YAML values); repeatable.")
@click.option("--deep", is_flag=True,
              help="Also encode the first training samples through the real pipeline.")
@click.option("--samples", default=4, show_default=True, type=click.IntRange(min=1),
              help="How many samples --deep reads.")
@click.option("--quick", is_flag=True,
              help="Check the config only: open no tokenizer, component or dataset (no torch).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def validate_command(config: str, sets: tuple[str, ...], deep: bool, samples: int, quick: bool,
                     as_json: bool) -> None:
    """Check CONFIG (YAML or JSON) and what it names; exit 1 listing every error."""
    from pathlib import Path

    from energon_plugins.config.load import read_config_file
    from energon_plugins.config.overrides import apply_overrides, parse_set_option
    from energon_plugins.config.validate import check_config

    if quick and deep:
        raise click.UsageError("--quick and --deep exclude each other")
    data = read_config_file(config)
    data = apply_overrides(data, dict(parse_set_option(item) for item in sets))
    result, issues = check_config(data, base_dir=Path(config).expanduser().resolve().parent)
    if result is not None and not issues and not quick:
        from energon_plugins._quiet import quietly
        from energon_plugins.config.preflight import preflight_issues

        with quietly():
            issues = preflight_issues(result, deep=deep, samples=samples)
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
        checked = "config only" if quick else "samples read" if deep else "components opened"
        click.echo(
            f"{config}: valid (task_encoder {result.task_encoder.name!r}, image_processor "
            f"{result.image_processor.name!r}, {packing}, seq_length {result.seq_length}; "
            f"{checked})"
        )
    if issues:
        raise SystemExit(1)
