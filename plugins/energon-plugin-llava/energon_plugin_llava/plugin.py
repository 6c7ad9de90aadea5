"""Hook implementations of energon-plugin-llava (import-light: pluggy only; the options
models are named as strings and imported when a plugin is built, validated or shown)."""

from energon_plugins import hookimpl


@hookimpl
def register_task_encoders(register):
    """Register ``llava``, built lazily from a ``"module:attr"`` string."""
    register(
        "llava",
        "energon_plugin_llava.encoder:build_llava_task_encoder",
        options="energon_plugin_llava.options:LlavaOptions",
        description="LLaVA-1.5: VQA, captioning and multi-turn conversations (crude 'llava' "
        "format, and the 'chatml' data that energon-plugins convert writes) in the Vicuna v1 "
        "format, image tag expanded to (crop/patch)^2 tokens",
        aliases=("llava-1.5",),
    )


@hookimpl
def register_image_processors(register):
    """Register ``llava-clip``: CLIP at 336 px, images padded to a square first."""
    register(
        "llava-clip",
        "energon_plugin_llava.image_processor:build_llava_clip",
        options="energon_plugin_llava.options:LlavaClipOptions",
        description="LLaVA-1.5 CLIP preprocessing: pad to square with the mean colour, resize "
        "and crop to 336 px (transformers CLIPImageProcessor)",
    )
