"""Registers the built-in image processor ``hf``."""

from energon_plugins.host._markers import hookimpl


@hookimpl
def register_image_processors(register):
    """Register ``hf``: any transformers image processor, from a local directory or a class."""
    register(
        "hf",
        "energon_plugins.encoding.image_processors.hf:build_hf_image_processor",
        options="energon_plugins.encoding.image_processors.options:HFImageProcessorOptions",
        description="A transformers image processor from a local directory or a class name",
        aliases=("transformers",),
    )
