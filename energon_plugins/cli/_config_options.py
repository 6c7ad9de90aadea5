"""What the verbs that read a config share: the ``--set KEY=VALUE`` option and building the
datamodule of CONFIG under the start-up status (:func:`datamodule_for`)."""

from collections.abc import Callable, Mapping
from typing import Any

import click

SET_HELP = "Override a config key (dotted keys, YAML values); repeatable."


def set_option(help: str = SET_HELP) -> Callable[[Any], Any]:
    """The repeatable ``--set KEY=VALUE`` option (its values arrive as ``sets``)."""
    return click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=help)


def datamodule_for(
    config: str,
    sets: tuple[str, ...],
    status: Any,
    *,
    defaults: Mapping[str, Any] | None = None,
    check_fields: bool = True,
) -> tuple[Any, Any]:
    """Build CONFIG's datamodule step by step (each step shown on ``status``) with the ``--set``
    overrides over ``defaults``; returns ``(datamodule, checked config)``.

    Known start-up warnings are hidden unless ``--debug`` was given, and with ``check_fields``
    the dataset's field map is checked first (else every sample would fail, one traceback each).
    """
    from energon_plugins.config.overrides import parse_set_option
    from energon_plugins.loading.startup import build_datamodule_step_by_step

    if not (click.get_current_context().find_root().obj or {}).get("debug"):
        from energon_plugins.cli._output import quiet_known_warnings

        quiet_known_warnings()
    overrides = {**(defaults or {}), **dict(parse_set_option(item) for item in sets)}
    datamodule, checked = build_datamodule_step_by_step(config, overrides, status)
    if check_fields:
        from energon_plugins.checks.field_map import check_field_map

        check_field_map(datamodule.path)
    return datamodule, checked
