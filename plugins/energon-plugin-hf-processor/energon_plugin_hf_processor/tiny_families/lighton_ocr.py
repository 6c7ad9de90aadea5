"""LightOnOCR (``lightonai/LightOnOCR-1B-1025``): Pixtral's image processor (14-pixel patches
merged 2x2) before a Qwen3 decoder. Each image becomes one ``<|image_pad|>`` per 28x28 pixels,
with no row breaks or end token; the batch's pixels are zero-padded to the largest image, with
every image's ``image_sizes``."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import QWEN2_SPECIAL, TinySpec

# lightonai/LightOnOCR-1B-1025 chat_template.jinja, copied exactly: an empty system turn
# first, one <|image_pad|> per image (expanded by the processor), a newline after each part.
CHAT_TEMPLATE = """{% set image_count = namespace(value=0) %}
{% for message in messages %}
{% if loop.first and message['role'] != 'system' %}
<|im_start|>system<|im_end|>
{% endif %}
<|im_start|>{{ message['role'] }}
{% if message['content'] is string %}
{{ message['content'] }}<|im_end|>
{% else %}
{% for content in message['content'] %}
{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}
{% set image_count.value = image_count.value + 1 %}
{% if add_vision_id %}
Picture {{ image_count.value }}:
{% endif -%}
<|image_pad|>
{%- elif 'text' in content %}
{{ content['text'] }}
{% endif %}
{% endfor %}
<|im_end|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

# The checkpoint's Qwen2 tokenizer's special tokens in id order (<|endoftext|> 151643 ...
# <|video_pad|> 151656); the processor reads its three image tokens from the tokenizer.
SPECIAL = QWEN2_SPECIAL
# 14-pixel patches merged 2x2: one <|image_pad|> per 28x28 pixels, images scaled to at most
# 112 pixels (4x4 tokens).
PATCH = 14
MERGE = 2


def build(tokenizer: Any) -> Any:
    """The processor: ``LightOnOcrProcessor`` with ``spatial_merge_size`` 2, as the checkpoint's."""
    import transformers

    image = transformers.PixtralImageProcessor(
        size={"longest_edge": 4 * PATCH * MERGE},
        patch_size={"height": PATCH, "width": PATCH},
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    return transformers.LightOnOcrProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=PATCH,
        spatial_merge_size=MERGE,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``LightOnOcrForConditionalGeneration`` (Pixtral vision, 2x2 patch merger, Qwen3)."""
    import transformers

    config = transformers.LightOnOcrConfig(
        text_config=text_config(tokenizer, model_type="qwen3"),
        vision_config=vision_config(
            model_type="pixtral", head_dim=16, image_size=4 * PATCH * MERGE, patch_size=PATCH
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        spatial_merge_size=MERGE,
        tie_word_embeddings=False,
    )
    return transformers.LightOnOcrForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "lighton-ocr",
        SPECIAL,
        build,
        "lightonai/LightOnOCR-1B-1025",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={
            "image_token": "<|image_pad|>",
            "image_break_token": "<|vision_pad|>",
            "image_end_token": "<|vision_end|>",
        },
        # A text part is written with a newline after it: an answer closes with "\n<|im_end|>".
        end_of_turn="\n<|im_end|>",
        model=model,
    ),
)
