"""``energon-plugins validate CONFIG``: every problem of a config file, each with its path.

First the config itself (keys, types, plugin names and options, paths, the rules between
keys: import-light); an ``msc://`` dataset is then checked over the storage client like a local
one (profile, bucket, credentials, ``.nv-meta``, splits, shards: the URL and the profile named,
never a credential). When that passes, what the run would open: the tokenizer (and its chat
template), the image processor (which one, and from where), the packing strategy, the task
encoders (image token, ``image_tokens`` against the processor, ``seq_length`` against one
image) and the dataset's metadata; then the first training samples, read one by one (at most
64 or 5 s), against ``seq_length``: samples skipped are an error, answers cut a warning. With
``--deep`` the first batches go through the whole pipeline too; ``--quick`` stops after the
config itself. A status line on stderr (on a terminal) says what runs meanwhile.
"""

from collections.abc import Callable
from typing import Any

import click

from energon_plugins.cli._config_options import set_option
from energon_plugins.cli._output import print_json


@click.command("validate")
@click.argument("config", type=click.Path(dir_okay=False))
@set_option("Override a key before validating (dotted keys, YAML values); repeatable.")
@click.option(
    "--deep",
    is_flag=True,
    help="Also run the first training batches through the whole pipeline (batching, batch format).",
)
@click.option(
    "--samples",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many batches --deep reads.",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Check the config only: open no tokenizer, component or dataset, read no sample (no torch).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def validate_command(
    config: str, sets: tuple[str, ...], deep: bool, samples: int, quick: bool, as_json: bool
) -> None:
    """Check CONFIG (YAML or JSON) and what it names; exit 1 listing every error."""
    from energon_plugins.cli._output import startup_status

    if quick and deep:
        raise click.UsageError("--quick and --deep exclude each other")
    with startup_status(f"checking {config}...") as status:
        result, report = _check(config, sets, deep=deep, samples=samples, quick=quick, progress=status.update)
        status.stop()
    issues, warnings, notes = report.issues, report.warnings, report.notes
    if as_json:
        print_json(
            {
                "config": config,
                "valid": not issues,
                "errors": [{"path": i.path, "message": i.message} for i in issues],
                "warnings": [{"path": w.path, "message": w.message} for w in warnings],
                "notes": notes,
            }
        )
    elif issues:
        _print_findings(notes, warnings)
        click.echo(f"{config}: {len(issues)} error{'s' * (len(issues) != 1)}", err=True)
        for issue in issues:
            click.echo(f"  {issue.path}: {issue.message}", err=True)
    else:
        assert result is not None
        packing = result.packing.name if result.packing else "no packing"
        checked = "config only" if quick else "batches read" if deep else "samples read"
        click.echo(
            f"{config}: valid (task_encoder {result.task_encoder.name!r}, image_processor "
            f"{result.image_processor.name!r}, {packing}, seq_length {result.seq_length}; "
            f"{checked})"
        )
        _print_findings(notes, warnings)
    if issues:
        raise SystemExit(1)


def _print_findings(notes: list[str], warnings: list[Any]) -> None:
    """The notes (indented, stdout), then the warnings (``warning: KEY: ...``, stderr)."""
    for note in notes:
        click.echo(f"  {note}")
    for warning in warnings:
        click.echo(f"warning: {warning.path}: {warning.message}", err=True)


def _environment_issues() -> list[Any]:
    """The environment variables a run reads later, checked now (``ENERGON_PLUGINS_DATA_TIMEOUT``
    is read when the validation loader is built): one issue each, named by the variable."""
    from energon_plugins.config.settings import ConfigIssue
    from energon_plugins.errors import ConfigError
    from energon_plugins.loading.distributed import DATA_TIMEOUT_VARIABLE, data_timeout

    try:
        data_timeout()
    except ConfigError as exc:
        return [ConfigIssue(DATA_TIMEOUT_VARIABLE, str(exc).split(": ", 1)[-1])]
    return []


def remote_dataset_issues(path: str) -> list[Any]:
    """The checks of a local dataset path, for an ``msc://`` one (the config check leaves URLs
    alone): the profile, the bucket, the credentials, ``.nv-meta``, the splits and the shards,
    one issue at ``path`` naming the URL and the profile (no credential)."""
    from energon_plugins.config.remote_dataset import remote_dataset_problem
    from energon_plugins.config.remote_storage import is_msc
    from energon_plugins.config.settings import ConfigIssue

    if not is_msc(path):
        return []
    problem = remote_dataset_problem(path)
    return [] if problem is None else [ConfigIssue("path", problem)]


def _check(
    config: str,
    sets: tuple[str, ...],
    *,
    deep: bool,
    samples: int,
    quick: bool,
    progress: Callable[[str], None],
) -> tuple[Any, Any]:
    """``(validated config or None, PreflightReport)`` of CONFIG with the ``--set`` overrides."""
    from pathlib import Path

    from energon_plugins.checks.preflight import PreflightReport, run_preflight
    from energon_plugins.config.load import read_config_file
    from energon_plugins.config.overrides import apply_overrides, parse_set_option
    from energon_plugins.config.validate import check_config, validation_split_warning

    data = read_config_file(config)
    data = apply_overrides(data, dict(parse_set_option(item) for item in sets))
    result, issues = check_config(data, base_dir=Path(config).expanduser().resolve().parent)
    issues = [*issues, *_environment_issues()]
    if result is not None and not issues:
        progress(f"reading the metadata of {result.path}...")
        issues += remote_dataset_issues(result.path)
    if result is None or issues:
        return result, PreflightReport(issues=list(issues))
    no_val_split = validation_split_warning(result)
    if quick:
        report = PreflightReport()
    else:
        from energon_plugins._quiet import quietly

        with quietly():
            report = run_preflight(result, read=True, deep=deep, samples=samples, progress=progress)
    if no_val_split is not None:
        report.warnings.append(no_val_split)
    return result, report
