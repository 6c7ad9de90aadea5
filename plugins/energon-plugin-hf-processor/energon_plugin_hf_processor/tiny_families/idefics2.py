"""Idefics2 (``HuggingFaceM4/idefics2-8b``): each image's ``<image>`` tokens (the perceiver's
latents) between ``<fake_token_around_image>`` tokens; all images of a call in one row,
padded to the largest, with their pixel mask."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# HuggingFaceM4/idefics2-8b chat_template.json.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{message['role'].capitalize()}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# Mistral's tokens, then the three the checkpoint adds (32000-32002).
SPECIAL = ("<unk>", "<s>", "</s>", "<fake_token_around_image>", "<image>", "<end_of_utterance>")


def build(tokenizer: Any) -> Any:
    """The processor: images resized to 28-56 pixels a side, 4 latents each, not split."""
    import transformers

    image = transformers.Idefics2ImageProcessor(
        size={"shortest_edge": 28, "longest_edge": 56}, do_image_splitting=False
    )
    return transformers.Idefics2Processor(
        image_processor=image, tokenizer=tokenizer, image_seq_len=4, chat_template=CHAT_TEMPLATE
    )


def model(tokenizer: Any) -> Any:
    """A random ``Idefics2ForConditionalGeneration`` (14-pixel patches, a 4-latent perceiver,
    Mistral text)."""
    import transformers

    config = transformers.Idefics2Config(
        text_config=text_config(tokenizer, model_type="mistral"),
        vision_config=vision_config(image_size=56),
        perceiver_config=dict(
            hidden_size=32,
            resampler_n_latents=4,
            resampler_depth=1,
            resampler_n_heads=2,
            resampler_head_dim=16,
            num_key_value_heads=1,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )
    return transformers.Idefics2ForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "idefics2",
        SPECIAL,
        build,
        "HuggingFaceM4/idefics2-8b",
        pad="<unk>",
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        end_of_turn="<end_of_utterance>",
        model=model,
    ),
)
