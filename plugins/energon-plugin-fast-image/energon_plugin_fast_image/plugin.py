"""Hook implementations of energon-plugin-fast-image (import-light: pluggy only; the options
models are named as strings and imported when a plugin is built, validated or shown)."""

from energon_plugins import hookimpl


@hookimpl
def register_image_processors(register):
    """Register ``fast-clip``, ``fast-siglip`` and ``fast-qwen2-vl``, built lazily from
    ``"module:attr"`` strings."""
    register(
        "fast-clip",
        "energon_plugin_fast_image.processor:build_fast_clip",
        options="energon_plugin_fast_image.options:FastCLIPOptions",
        description="CLIP preprocessing in batched torch on uint8 (resize shortest edge, "
        "center crop, normalize)",
    )
    register(
        "fast-siglip",
        "energon_plugin_fast_image.processor:build_fast_siglip",
        options="energon_plugin_fast_image.options:FastSiglipOptions",
        description="SigLIP preprocessing in batched torch on uint8 (resize to a fixed size, normalize)",
    )
    register(
        "fast-qwen2-vl",
        "energon_plugin_fast_image.qwen:build_fast_qwen2_vl",
        options="energon_plugin_fast_image.options:FastQwen2VLOptions",
        description="Qwen2-VL / 2.5-VL / 3-VL preprocessing on uint8 (dynamic resolution, "
        "patches and image_grid_thw as transformers gives them)",
        aliases=("fast-qwen-vl",),
    )
