"""DeepSeek-VL (``deepseek-community/deepseek-vl-1.3b-chat``): one SigLIP image per
``<image_placeholder>``, padded to a square, a fixed number of tokens per image."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# deepseek-community/deepseek-vl-1.3b-chat chat_template (as transformers' processor tests
# copy it): a fixed system text, "User: " / "Assistant: " turns; a user turn ends in a blank
# line, an answer in <｜end▁of▁sentence｜> only when another turn follows it.
CHAT_TEMPLATE = (
    "{% set seps = ['\n\n', '<\uff5cend\u2581of\u2581sentence\uff5c>'] %}{% set i = 0 %}"
    "You are a helpful language and vision assistant. You are able to understand the visual "
    "content that the user provides, and assist the user with a variety of tasks using natural "
    "language.\n\n{% for message in messages %}{% if message['role']|lower == 'user' %}User: "
    "{% elif message['role']|lower == 'assistant' %}Assistant:{% if not (loop.last and not "
    "add_generation_prompt and message['content'][0]['type']=='text' and "
    "message['content'][0]['text']=='') %} {% endif %}{% else %}"
    "{{ message['role'].capitalize() }}: {% endif %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<image_placeholder>{% elif content['type'] == 'text' %}"
    "{% set text = content['text'] %}{% if loop.first %}{% set text = text.lstrip() %}{% endif %}"
    "{% if loop.last %}{% set text = text.rstrip() %}{% endif %}{% if not loop.first and "
    "message['content'][loop.index0-1]['type'] == 'text' %}{{ ' ' + text }}{% else %}{{ text }}"
    "{% endif %}{% endif %}{% endfor %}{% if not loop.last or add_generation_prompt %}"
    "{% if message['role']|lower == 'user' %}{{ seps[0] }}{% else %}{{ seps[1] }}{% endif %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)

BOS, EOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
SPECIAL = (BOS, EOS, "<image_placeholder>")


def build(tokenizer: Any) -> Any:
    """The processor: 32x32 images (padded to a square) of 16-pixel patches, 4 tokens each."""
    import transformers

    image = transformers.DeepseekVLImageProcessor(size={"height": 32, "width": 32})
    return transformers.DeepseekVLProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE, num_image_tokens=4
    )


def model(tokenizer: Any) -> Any:
    """A random ``DeepseekVLForConditionalGeneration`` (SigLIP 32x32, Llama text)."""
    import transformers

    config = transformers.DeepseekVLConfig(
        text_config=text_config(tokenizer, model_type="llama"),
        vision_config=vision_config(model_type="siglip_vision_model", image_size=32, patch_size=16),
        image_token_id=tokenizer.convert_tokens_to_ids("<image_placeholder>"),
    )
    return transformers.DeepseekVLForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "deepseek-vl",
        SPECIAL,
        build,
        "deepseek-community/deepseek-vl-1.3b-chat",
        pad=EOS,
        bos=BOS,
        eos=EOS,
        extra={"image_token": "<image_placeholder>"},
        end_of_turn="",
        model=model,
    ),
)
