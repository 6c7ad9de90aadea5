"""Hook implementations of energon-plugin-qwen-vl (import-light: pluggy and pydantic only)."""

from energon_plugins import hookimpl

from energon_plugin_qwen_vl.options import Qwen2VLImageProcessorOptions, Qwen2VLOptions


@hookimpl
def register_task_encoders(register):
    """Register ``qwen2-vl``, built lazily from a ``"module:attr"`` string."""
    register(
        "qwen2-vl",
        "energon_plugin_qwen_vl.encoder:build_qwen2_vl_task_encoder",
        options=Qwen2VLOptions,
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
        options=Qwen2VLImageProcessorOptions,
        description="transformers Qwen2VLImageProcessor: dynamic resolution (min/max pixels), "
        "(patches, dim) pixel values and image_grid_thw",
    )
