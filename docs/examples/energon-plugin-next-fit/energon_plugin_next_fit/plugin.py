"""Hook implementations: what this distribution registers (imports only the options)."""

from energon_plugin_next_fit.options import NextFitOptions
from energon_plugins import hookimpl


@hookimpl
def register_packing_strategies(register):
    """Register ``next-fit`` (alias ``nf``)."""
    register(
        "next-fit",
        "energon_plugin_next_fit.strategy:build_next_fit",  # imported only when built
        options=NextFitOptions,
        description="Keep buffer order; start a new pack when the next sample does not fit",
        aliases=("nf",),
    )
