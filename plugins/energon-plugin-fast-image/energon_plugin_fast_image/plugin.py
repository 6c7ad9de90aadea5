"""Hook implementations of energon-plugin-fast-image (import-light: pluggy and pydantic only)."""

from energon_plugins import hookimpl

from energon_plugin_fast_image.options import FastCLIPOptions, FastSiglipOptions


@hookimpl
def register_image_processors(register):
    """Register ``fast-clip`` and ``fast-siglip``, built lazily from ``"module:attr"`` strings."""
    register(
        "fast-clip",
        "energon_plugin_fast_image.processor:build_fast_clip",
        options=FastCLIPOptions,
        description="CLIP preprocessing in batched torch on uint8 (resize shortest edge, "
        "center crop, normalize)",
    )
    register(
        "fast-siglip",
        "energon_plugin_fast_image.processor:build_fast_siglip",
        options=FastSiglipOptions,
        description="SigLIP preprocessing in batched torch on uint8 (resize to a fixed size, "
        "normalize)",
    )
