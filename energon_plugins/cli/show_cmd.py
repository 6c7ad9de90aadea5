"""``energon-plugins show NAME [--kind K]``: one plugin's description, aliases and options."""

from typing import Any

import click

from energon_plugins.cli._output import console, print_json
from energon_plugins.cli.list_cmd import KIND_CHOICES


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or repr(annotation)
    return text.replace("typing.", "").replace("NoneType", "None")


def option_rows(spec: Any) -> list[dict[str, str]]:
    """One row per option of ``spec``: name, type, default and description."""
    if spec.options is None:
        return []
    rows = []
    for name, field in spec.options.model_fields.items():
        if field.is_required():
            default = "(required)"
        elif field.default_factory is not None:
            default = repr(field.default_factory())
        else:
            default = repr(field.default)
        rows.append(
            {
                "name": field.alias or name,
                "type": _type_name(field.annotation),
                "default": default,
                "description": field.description or "",
            }
        )
    return rows


def find_specs(name: str, kind: str | None) -> list[Any]:
    """The specs ``name`` selects, in every kind (or ``kind``); raises when there is none."""
    from energon_plugins.errors import PluginNotFoundError
    from energon_plugins.host.kinds import KINDS, normalize_kind
    from energon_plugins.host.manager import get_registry

    registry = get_registry()
    kinds = (normalize_kind(kind),) if kind else KINDS
    found, errors = [], []
    for k in kinds:
        try:
            found.append(registry.resolve(k, name))
        except PluginNotFoundError as exc:
            errors.append(str(exc))
    if not found:
        if len(errors) == 1:
            raise PluginNotFoundError(errors[0])
        from energon_plugins._suggest import did_you_mean

        every = sorted({n for k in kinds for n in registry.names(k)})
        raise PluginNotFoundError(
            f"no plugin named {name!r}{did_you_mean(name.rpartition(':')[2], every)}. "
            f"Installed: {', '.join(every) or '(none)'}."
        )
    return found


@click.command("show")
@click.argument("name")
@click.option(
    "--kind",
    type=click.Choice(KIND_CHOICES, case_sensitive=False),
    default=None,
    help="The kind, when the name exists in several kinds.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def show_command(name: str, kind: str | None, as_json: bool) -> None:
    """Show a plugin: description, distribution, aliases and its options with defaults."""
    specs = find_specs(name, kind)
    if as_json:
        print_json(
            [
                {
                    "name": spec.name,
                    "kind": spec.kind,
                    "distribution": spec.distribution,
                    "version": spec.version,
                    "description": spec.description,
                    "aliases": list(spec.aliases),
                    "module": spec.module,
                    "factory": spec.factory if isinstance(spec.factory, str) else repr(spec.factory),
                    "options": option_rows(spec),
                }
                for spec in specs
            ]
        )
        return

    from rich.table import Table

    out = console()
    for spec in specs:
        out.print(f"[bold]{spec.name}[/bold]  ({spec.kind})")
        out.print(f"  {spec.description or '(no description)'}")
        out.print(f"  distribution: {spec.distribution} {spec.version}")
        out.print(f"  aliases: {', '.join(spec.aliases) or '(none)'}")
        out.print(f"  select as: {spec.name!r} or {spec.qualified_name!r}")
        rows = option_rows(spec)
        if not rows:
            out.print("  options: (none)\n")
            continue
        table = Table(title=f"options ({spec.options.__name__})", title_justify="left")
        for column in ("option", "type", "default", "description"):
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(row["name"], row["type"], row["default"], row["description"])
        out.print(table)
        out.print()
