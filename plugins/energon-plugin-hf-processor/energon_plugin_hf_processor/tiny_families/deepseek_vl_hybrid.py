"""DeepSeek-VL hybrid (``deepseek-community/deepseek-vl-7b-chat``): DeepSeek-VL's template and
tokens; each image as a SigLIP view (``pixel_values``) and a SAM view at a higher resolution
(``high_res_pixel_values``), one row of each per image, a fixed number of tokens per image."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_families.deepseek_vl import BOS, CHAT_TEMPLATE, EOS, SPECIAL
from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# deepseek-community/deepseek-vl-7b-chat ships DeepSeek-VL 1.3b's chat template (transformers'
# DeepseekVLHybridProcessor tests copy the same text; its integration tests render it).


def build(tokenizer: Any) -> Any:
    """The processor: 32x32 SigLIP views (4 tokens each) beside 64x64 SAM views."""
    import transformers

    image = transformers.DeepseekVLHybridImageProcessor(
        size={"height": 32, "width": 32}, high_res_size={"height": 64, "width": 64}
    )
    return transformers.DeepseekVLHybridProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE, num_image_tokens=4
    )


def model(tokenizer: Any) -> Any:
    """A random ``DeepseekVLHybridForConditionalGeneration`` (SigLIP 32x32 of 16-pixel patches,
    SAM 64x64 of 16-pixel patches, Llama text): 2x2 features of each view per image."""
    import transformers

    config = transformers.DeepseekVLHybridConfig(
        text_config=text_config(tokenizer, model_type="llama"),
        vision_config=vision_config(model_type="siglip_vision_model", image_size=32, patch_size=16),
        high_res_vision_config=dict(
            model_type="sam_vision_model",
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            mlp_dim=64,
            output_channels=8,
            image_size=64,
            patch_size=16,
            global_attn_indexes=[0],
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<image_placeholder>"),
    )
    return transformers.DeepseekVLHybridForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "deepseek-vl-hybrid",
        SPECIAL,
        build,
        "deepseek-community/deepseek-vl-7b-chat",
        pad=EOS,
        bos=BOS,
        eos=EOS,
        extra={"image_token": "<image_placeholder>"},
        end_of_turn="",
        model=model,
    ),
)
