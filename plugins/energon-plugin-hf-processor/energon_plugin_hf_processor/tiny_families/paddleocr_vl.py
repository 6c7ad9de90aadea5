"""PaddleOCR-VL (``PaddleOCRVLProcessor``; here PaddlePaddle/PaddleOCR-VL's): images only.

``<|begin_of_sentence|>`` opens the conversation, a user turn is ``User: `` + its images +
its text + a newline, an answer ``Assistant:\\n`` + text + ``</s>``. An image is
``<|IMAGE_START|>`` + ``<|IMAGE_PLACEHOLDER|>`` x tokens + ``<|IMAGE_END|>``, one token per
2x2 merge of 14-pixel patches (one frame: ``temporal_patch_size`` 1), with Qwen-style
``pixel_values`` / ``image_grid_thw`` and ``mm_token_type_ids``. The template writes a
user turn's images before its text, whatever their order in the message.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# PaddlePaddle/PaddleOCR-VL chat_template.jinja.
PADDLEOCR_VL_TEMPLATE = r"""{%- if not add_generation_prompt is defined -%}
    {%- set add_generation_prompt = true -%}
{%- endif -%}
{%- if not cls_token is defined -%}
    {%- set cls_token = "<|begin_of_sentence|>" -%}
{%- endif -%}
{%- if not eos_token is defined -%}
    {%- set eos_token = "</s>" -%}
{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
    {%- if message["role"] == "user" -%}
        {{- "User: " -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "image" -%}
                {{ "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>" }}
            {%- endif -%}
        {%- endfor -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ "\n" -}}
    {%- elif message["role"] == "assistant" -%}
        {{- "Assistant:\n" -}}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] }}
            {%- endif -%}
        {%- endfor -%}
        {{ eos_token -}}
    {%- elif message["role"] == "system" -%}
        {%- for content in message["content"] -%}
            {%- if content["type"] == "text" -%}
                {{ content["text"] + "\n" }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- "Assistant:\n" -}}
{%- endif -%}
"""

# PaddlePaddle/PaddleOCR-VL's (ERNIE-4.5) special tokens that the template, the processor and
# the model use, in id order.
PADDLEOCR_VL_SPECIAL = (
    "<unk>",
    "<s>",
    "</s>",
    "<|begin_of_sentence|>",
    "<|end_of_sentence|>",
    "<|IMAGE_PLACEHOLDER|>",
    "<|IMAGE_START|>",
    "<|IMAGE_END|>",
)

PATCH = 14


def _build(tokenizer: Any) -> Any:
    import transformers

    image = transformers.PaddleOCRVLImageProcessor(
        patch_size=PATCH,
        merge_size=2,
        temporal_patch_size=1,
        size={"shortest_edge": (2 * PATCH) ** 2, "longest_edge": (2 * PATCH) ** 2 * 16},
    )
    return transformers.PaddleOCRVLProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=PADDLEOCR_VL_TEMPLATE
    )


def _model(tokenizer: Any) -> Any:
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.PaddleOCRVLConfig(
        text_config=text_config(
            tokenizer,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            patch_size=PATCH,
            image_size=2 * PATCH,
            spatial_merge_size=2,
        ),
        image_token_id=ids("<|IMAGE_PLACEHOLDER|>"),
        vision_start_token_id=ids("<|IMAGE_START|>"),
        vision_end_token_id=ids("<|IMAGE_END|>"),
    )
    return transformers.PaddleOCRVLForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "paddleocr-vl",
        PADDLEOCR_VL_SPECIAL,
        _build,
        "PaddlePaddle/PaddleOCR-VL",
        pad="<unk>",
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        extra={"image_token": "<|IMAGE_PLACEHOLDER|>"},
        end_of_turn="</s>",
        model=_model,
    ),
)
