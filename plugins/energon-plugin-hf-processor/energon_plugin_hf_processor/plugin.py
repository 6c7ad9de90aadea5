"""Hook implementations of energon-plugin-hf-processor (import-light: pluggy and pydantic only)."""

from energon_plugins import hookimpl

from energon_plugin_hf_processor.options import HFProcessorOptions


@hookimpl
def register_task_encoders(register):
    """Register ``hf-processor``, built lazily from a ``"module:attr"`` string."""
    register(
        "hf-processor",
        "energon_plugin_hf_processor.encoder:build_hf_processor_task_encoder",
        options=HFProcessorOptions,
        description="Any vision-language model's own transformers processor (AutoProcessor "
        "directory): conversations, VQA, captioning and interleaved samples with the "
        "processor's ids, pixels and vision inputs, assistant-only labels",
    )
