"""Building a datamodule from a config step by step, naming each step (``preview``, ``bench``, ``demo``).

The config is checked first (import-light: a mistake is reported before torch is imported),
then torch, transformers and Energon are imported, then the tokenizer and the components are
built; each step is named on the start-up status
(:func:`~energon_plugins.cli._output.startup_status`), which shows only where stderr is a
terminal.
"""

from collections.abc import Mapping
from typing import Any

HEAVY_MODULES = ("torch", "transformers", "megatron.energon")
"""What a datamodule needs and takes seconds to import (torch about 1.7 s, Energon about 2 s,
transformers about 1 s on a 2-core machine)."""


def import_heavy_modules() -> None:
    """Import :data:`HEAVY_MODULES` (quietly: without megatron-core's notes about extras)."""
    from energon_plugins._quiet import import_quietly

    for name in HEAVY_MODULES:
        import_quietly(name)


def build_datamodule_step_by_step(config: str, overrides: Mapping[str, Any], status: Any) -> tuple[Any, Any]:
    """Check ``config`` with ``overrides``, import the heavy modules, build the datamodule.

    The datamodule gets no batch format (the task encoder's batches, which ``preview`` and
    ``bench`` read); the configured one is :func:`configured_batch_format` of the returned
    config. ``status.update(text)`` is called before each step.

    Returns:
        ``(datamodule, config)``: the datamodule, and the validated ``DataModuleConfig``.

    Raises:
        ConfigValidationError: the config (with the overrides) is invalid; nothing is imported.
    """
    from energon_plugins.config.load import load_config
    from energon_plugins.loading.datamodule import build_datamodule

    status.update(f"checking {config}...")
    checked = load_config(config, dict(overrides))
    status.update("importing torch, transformers and Energon...")
    import_heavy_modules()
    status.update("loading the tokenizer and building the image processor and task encoder...")
    datamodule = build_datamodule(checked, batch_format=None)
    return datamodule, checked


def configured_batch_format(config: Any) -> dict[str, Any] | None:
    """The ``batch_format`` selection of a validated config, as the datamodule receives it
    (``{name, options}``; ``None`` when the config sets ``batch_format: null``)."""
    from energon_plugins.loading.build import datamodule_arguments

    return datamodule_arguments(config)["batch_format"]
