"""VideoLLaMA3 (``VideoLlama3Processor``; here lkhl/VideoLLaMA3-2B-Image-HF's): images and videos.

ChatML turns (``<|im_start|>`` role ``\\n`` ... ``<|im_end|>\\n``, no system prompt unless
``add_system_prompt``); an image is ``<|image_pad|>`` x tokens then ``\\n``, a video its kept
frames as ``Time 0.0s:`` + ``<|video_pad|>`` x the frame's kept tokens, joined with ``,``. Images
are not merged (``image_merge_sizes`` 1), video frames are merged 2x2 (``video_merge_sizes``
2) and then compressed: ``video_compression_mask`` keeps a frame's tokens whose pixels differ
from the previous frame's (the first frame's all), so a frame's token count depends on its
content. Every output is one entry per image / video / merged video token along dim 0.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import QWEN2_SPECIAL, TinySpec

# lkhl/VideoLLaMA3-2B-Image-HF chat_template.jinja (main).
VIDEO_LLAMA_3_TEMPLATE = r"""{%- set identifier = 'im' %}
{% for message in messages %}
{% if add_system_prompt and loop.first and message['role'] != 'system' %}
{{- '<|im_start|>system
You are VideoLLaMA3 created by Alibaba DAMO Academy, a helpful assistant to help people understand images and videos.<|im_end|>
' -}}
{% endif %}
{% if message['role'] == 'stream' %}
{% set identifier = 'stream' %}
{% else %}
{% set identifier = 'im' %}
{% endif %}
{{- '<|' + identifier + '_start|>' + message['role'] + '
' -}}
{% if message['content'] is string %}
{{- message['content'] -}}
{% else %}
{% for content in message['content'] %}
{% if content['type'] == 'text' %}
{{- content['text'] -}}
{% elif content['type'] == 'image' %}
{{- '<|image_pad|>' + '
' -}}
{% elif content['type'] == 'video' %}
{{- '<|video_pad|>' + '
' -}}
{% endif %}
{% endfor %}
{% endif %}
{{- '<|' + identifier + '_end|>' -}}
{% if identifier != 'stream' %}
{{- '
' -}}
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
{{- '<|im_start|>assistant
' -}}
{% endif %}
"""


PATCH = 14


def _build(tokenizer: Any) -> Any:
    import transformers

    # Images: 14-pixel patches, not merged (28x28 .. 56x56: 4 .. 16 tokens).
    image = transformers.VideoLlama3ImageProcessor(
        patch_size=PATCH,
        merge_size=1,
        size={"shortest_edge": (2 * PATCH) ** 2, "longest_edge": (4 * PATCH) ** 2},
    )
    # Videos: 2x2-merged patches; the longest edge is the whole video's pixels (split
    # among its frames), so 4 frames get 56x56 each (4 tokens a frame, before compression).
    video = transformers.VideoLlama3VideoProcessor(
        patch_size=PATCH,
        merge_size=2,
        size={"shortest_edge": (2 * PATCH) ** 2, "longest_edge": 4 * (4 * PATCH) ** 2},
    )
    return transformers.VideoLlama3Processor(
        image_processor=image,
        tokenizer=tokenizer,
        video_processor=video,
        chat_template=VIDEO_LLAMA_3_TEMPLATE,
    )


def _model(tokenizer: Any) -> Any:
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.VideoLlama3Config(
        text_config=text_config(tokenizer, model_type="qwen2"),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, patch_size=PATCH
        ),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
    )
    return transformers.VideoLlama3ForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "videollama3",
        QWEN2_SPECIAL,
        _build,
        "lkhl/VideoLLaMA3-2B-Image-HF",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        end_of_turn="<|im_end|>",
        model=_model,
        media=("image", "video"),
    ),
)
