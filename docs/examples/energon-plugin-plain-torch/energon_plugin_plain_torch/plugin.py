"""Hook implementations: what this distribution registers (imports only the options)."""

from energon_plugin_plain_torch.options import PlainTorchOptions
from energon_plugins import hookimpl


@hookimpl
def register_batch_formats(register):
    """Register ``plain-torch``."""
    register(
        "plain-torch",
        "energon_plugin_plain_torch.batch_format:build_plain_torch",  # imported only when built
        options=PlainTorchOptions,
        description="Next-token labels, position ids and the loss-token count for a plain loop",
    )
