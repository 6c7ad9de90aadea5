"""Hook implementations of energon-plugin-hf-processor (import-light: the options model is
named as a string, imported when the encoder is built or its options are validated)."""

from energon_plugins import hookimpl


@hookimpl
def register_task_encoders(register):
    """Register ``hf-processor``, built lazily from a ``"module:attr"`` string."""
    register(
        "hf-processor",
        "energon_plugin_hf_processor.encoder:build_hf_processor_task_encoder",
        options="energon_plugin_hf_processor.options:HFProcessorOptions",
        description="Any vision-language model's own transformers processor (AutoProcessor "
        "directory): conversations, VQA, captioning and interleaved samples with the "
        "processor's ids, pixels and vision inputs, assistant-only labels",
    )
