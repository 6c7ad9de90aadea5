"""Registers the built-in task encoder ``multimodal``."""

from energon_plugins.host._markers import hookimpl


@hookimpl
def register_task_encoders(register):
    """Register ``multimodal``, the default encoder for VQA, captioning, interleaved and chatml samples."""
    register(
        "multimodal",
        "energon_plugins.encoding.task_encoders.multimodal:build_multimodal_task_encoder",
        options="energon_plugins.encoding.task_encoders.options:MultimodalOptions",
        description="VQA, captioning, interleaved and conversation (crude chatml) samples through "
        "the tokenizer's chat template",
        aliases=("default",),
    )
