"""Hook implementations of energon-plugin-qwen-vl (import-light: pluggy only; the options
models are named as strings and imported when a plugin is built, validated or shown)."""

from energon_plugins import hookimpl


@hookimpl
def register_task_encoders(register):
    """Register ``qwen2-vl``, built lazily from a ``"module:attr"`` string."""
    register(
        "qwen2-vl",
        "energon_plugin_qwen_vl.encoder:build_qwen2_vl_task_encoder",
        options="energon_plugin_qwen_vl.options:Qwen2VLOptions",
        description="Qwen2-VL: ChatML multi-turn conversations (crude 'chatml' format, several "
        "images), VQA and captioning; each image expanded to t*h*w/merge^2 <|image_pad|> tokens",
        aliases=("qwen2_vl",),
    )


@hookimpl
def register_image_processors(register):
    """Register ``qwen2-vl``: dynamic resolution between min_pixels and max_pixels."""
    register(
        "qwen2-vl",
        "energon_plugin_qwen_vl.image_processor:build_qwen2_vl_image_processor",
        options="energon_plugin_qwen_vl.options:Qwen2VLImageProcessorOptions",
        description="transformers Qwen2VLImageProcessor: dynamic resolution (min/max pixels), "
        "(patches, dim) pixel values and image_grid_thw",
    )
