"""The JSON Schema of the config file, with every installed plugin's options.

For each selection (``task_encoder``, ``validation_task_encoder``, ``image_processor``,
``packing``, ``batch_format``) the schema holds a union discriminated by ``name``: one variant per registered
plugin, whose ``name`` is a ``Literal`` of the names that select it (plain name, aliases,
``distribution:name``) and whose ``options`` is that plugin's options model. The variants are
built with :func:`pydantic.create_model` from the registry in use, so installing a plugin
extends the schema. A plain name claimed by two distributions appears only qualified.

In the schema ``name`` may be left out only for the kind's default plugin (``multimodal``,
``hf``, ``energon-plugins:megatron-bridge``), as in the loader. Import-light: no torch, transformers or Energon.
"""

from collections import Counter
from typing import Annotated, Any, Literal, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from energon_plugins.config.model import (
    DEFAULT_BATCH_FORMAT,
    DEFAULT_IMAGE_PROCESSOR,
    DEFAULT_TASK_ENCODER,
    DataModuleConfig,
)
from energon_plugins.host.kinds import BATCH_FORMAT, IMAGE_PROCESSOR, PACKING_STRATEGY, TASK_ENCODER
from energon_plugins.host.registry import PluginSpec, Registry, canonical_distribution

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _NoOptions(BaseModel):
    """A plugin without options: ``options`` must be empty."""

    model_config = ConfigDict(extra="forbid")


def _model_name(kind: str, spec: PluginSpec) -> str:
    words = f"{kind}_{spec.distribution}_{spec.name}".replace("-", "_").replace(".", "_")
    return "".join(part.capitalize() for part in words.split("_") if part)


class InheritTrainEncoder(BaseModel):
    """``validation_task_encoder`` without ``name``: the train encoder's, with these options."""

    model_config = ConfigDict(extra="forbid")

    options: dict[str, Any] | None = None


def _is_default(spec: PluginSpec, default: str | None, plain_counts: Counter) -> bool:
    """Whether ``spec`` is what ``default`` (a plain or ``distribution:name``) selects."""
    if default is None:
        return False
    distribution, _, plain = default.rpartition(":")
    if distribution:
        return spec.name == plain and canonical_distribution(spec.distribution) == distribution
    return spec.name == plain and plain_counts[plain] == 1


def _selection_union(registry: Registry, kind: str, *, default: str | None) -> Any:
    """The ``name``-discriminated union of one variant per registered plugin of ``kind``."""
    specs = registry.specs(kind)
    plain_counts = Counter(n for spec in specs for n in {spec.name, *spec.aliases})
    variants = []
    for spec in specs:
        names = [n for n in (spec.name, *spec.aliases) if plain_counts[n] == 1]
        names.append(spec.qualified_name)
        is_default = _is_default(spec, default, plain_counts)
        name_type: Any = Literal[tuple(names)]
        if is_default:
            shown = spec.qualified_name if ":" in str(default) else names[0]
            name_field = (name_type, Field(default=shown, description=spec.description))
        else:
            name_field = (name_type, Field(description=spec.description))
        options_model = spec.options or _NoOptions
        variants.append(
            pydantic.create_model(
                _model_name(kind, spec),
                __config__=ConfigDict(extra="forbid", title=f"{kind} {spec.name}"),
                __doc__=f"{spec.label}: {spec.description}".strip(),
                name=name_field,
                options=(options_model, Field(default_factory=options_model)),
            )
        )
    if not variants:
        return dict  # nothing installed: an open mapping
    if len(variants) == 1:
        return variants[0]
    return Annotated[Union[tuple(variants)], Field(discriminator="name")]  # noqa: UP007


def config_schema_model(registry: Registry | None = None) -> type[BaseModel]:
    """A pydantic model of the whole config whose selections are the installed plugins' unions."""
    if registry is None:
        from energon_plugins.host.manager import get_registry

        registry = get_registry()
    task = _selection_union(registry, TASK_ENCODER, default=DEFAULT_TASK_ENCODER)
    val = _selection_union(registry, TASK_ENCODER, default=None)
    image = _selection_union(registry, IMAGE_PROCESSOR, default=DEFAULT_IMAGE_PROCESSOR)
    packing = _selection_union(registry, PACKING_STRATEGY, default=None)
    batch_format = _selection_union(registry, BATCH_FORMAT, default=DEFAULT_BATCH_FORMAT)
    fields = DataModuleConfig.model_fields
    return pydantic.create_model(
        "EnergonPluginsConfig",
        __base__=DataModuleConfig,
        __doc__="An energon-plugins datamodule config file.",
        task_encoder=(task, Field(default=None, description=fields["task_encoder"].description)),
        validation_task_encoder=(
            val | InheritTrainEncoder | None,
            Field(default=None, description=fields["validation_task_encoder"].description),
        ),
        image_processor=(image, Field(default=None, description=fields["image_processor"].description)),
        packing=(packing | None, Field(default=None, description=fields["packing"].description)),
        batch_format=(
            batch_format | None,
            Field(default=None, description=fields["batch_format"].description),
        ),
    )


def config_json_schema(registry: Registry | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the config file for the installed plugins."""
    schema = config_schema_model(registry).model_json_schema()
    schema = {"$schema": SCHEMA_DIALECT, **schema}
    schema["title"] = "energon-plugins config"
    return schema
