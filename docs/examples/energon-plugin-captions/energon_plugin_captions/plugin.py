"""Hook implementations (no torch, no Energon import here)."""

from energon_plugin_captions.options import CaptionOptions
from energon_plugins import hookimpl


@hookimpl
def register_task_encoders(register):
    """Register ``captions``."""
    register(
        "captions",
        "energon_plugin_captions.encoder:build_caption_encoder",
        options=CaptionOptions,
        description="Image tokens, a prompt, then the caption (loss on the caption only)",
        aliases=("caption",),
    )
