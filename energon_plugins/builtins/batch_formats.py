"""Registers the built-in batch formats ``megatron-bridge``, ``megatron-lm`` and ``hf``."""

from energon_plugins.host._markers import hookimpl

_PACKAGE = "energon_plugins.encoding.batch_formats"


@hookimpl
def register_batch_formats(register):
    """Register ``megatron-bridge`` (the default), ``megatron-lm`` and ``hf``."""
    register(
        "megatron-bridge",
        f"{_PACKAGE}.bridge:build_megatron_bridge_format",
        description="The mapping Megatron-Bridge's vlm_step reads: next-token labels, "
        "visual_inputs, flat packed keys",
        aliases=("bridge",),
    )
    register(
        "megatron-lm",
        f"{_PACKAGE}.megatron_lm:build_megatron_lm_format",
        options=f"{_PACKAGE}.options:MegatronLMOptions",  # a string: listing imports no pydantic
        description="What Megatron-LM's examples/multimodal get_batch reads: tokens, labels one "
        "wider, imgs, num_tiles, cu_lengths",
        aliases=("mlm",),
    )
    register(
        "hf",
        f"{_PACKAGE}.hf:build_hf_format",
        description="Keyword arguments of a transformers model's forward, labels aligned",
        aliases=("transformers",),
    )
