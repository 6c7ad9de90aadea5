"""Hook implementations (imports pydantic only: no torch at listing time)."""

from energon_plugin_resize.options import ResizeOptions
from energon_plugins import hookimpl


@hookimpl
def register_image_processors(register):
    """Register ``resize``."""
    register(
        "resize",
        "energon_plugin_resize.processor:build_resize",
        options=ResizeOptions,
        description="Resize to a square, rescale and normalize (torch)",
    )
