"""HunyuanOCR (``HunYuanVLProcessor``, tencent/HunyuanOCR): images, Qwen-style grids.

``<｜hy_begin▁of▁sentence｜>`` opens the conversation (a system text follows it, closed by
``<｜hy_place▁holder▁no▁3｜>``); a user turn is its text, an image being
``<｜hy_place▁holder▁no▁100｜>`` + ``<｜hy_place▁holder▁no▁102｜>`` x tokens +
``<｜hy_place▁holder▁no▁101｜>``, closed by ``<｜hy_User｜>``; the answer follows directly and
``<｜hy_Assistant｜>`` (the eos token) closes it. An image of ``h x w`` merged 2x2 patches has
``h * (w + 1) + 2`` tokens (a row break per row, a begin and an end embedding).

The template writes an answer as ``{{ message['content'] }}`` and reads a system content as a
string (or a ``{'text': ...}`` dict), so both reach it as strings
(``FamilySpec.text_roles``); the user turn takes typed parts. It has no generation prompt.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# tencent/HunyuanOCR chat_template.jinja (as copied in ceo1st/HunyuanOCR,
# inference/nightly/hyocr_dflash/chat_template.jinja).
HUNYUAN_OCR_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% if messages[0]['content'] is string %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set system_message = messages[0]['content']['text'] %}{% endif %}"
    "<｜hy_begin▁of▁sentence｜>{{ system_message }}<｜hy_place▁holder▁no▁3｜>"
    "{% else %}{% set loop_messages = messages %}<｜hy_begin▁of▁sentence｜>{% endif %}"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<｜hy_place▁holder▁no▁100｜><｜hy_place▁holder▁no▁102｜><｜hy_place▁holder▁no▁101｜>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<｜hy_User｜>{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] }}<｜hy_Assistant｜>{% endif %}{% endfor %}"
)

BOS = "<｜hy_begin▁of▁sentence｜>"
EOS = "<｜hy_Assistant｜>"
PAD = "<｜hy_▁pad▁｜>"
# tencent/HunyuanOCR tokenizer_config.json: image and video tokens.
MEDIA_TOKENS = {
    "image_start_token": "<｜hy_place▁holder▁no▁100｜>",
    "image_end_token": "<｜hy_place▁holder▁no▁101｜>",
    "image_token": "<｜hy_place▁holder▁no▁102｜>",
    "video_start_token": "<｜hy_place▁holder▁no▁104｜>",
    "video_end_token": "<｜hy_place▁holder▁no▁105｜>",
    "video_token": "<｜hy_place▁holder▁no▁665｜>",
}
# The checkpoint's special tokens the template and the processor use, in id order.
HUNYUAN_SPECIAL = (
    BOS,
    PAD,
    "<｜hy_User｜>",
    EOS,
    "<｜hy_place▁holder▁no▁3｜>",
    *MEDIA_TOKENS.values(),
)

PATCH = 16
MERGE = 2


def _build(tokenizer: Any) -> Any:
    import transformers

    side = PATCH * MERGE
    # 2x2 to 4x4 merged patches an image: 8 to 22 tokens.
    image = transformers.HunYuanVLImageProcessor(
        patch_size=PATCH,
        merge_size=MERGE,
        temporal_patch_size=1,
        size={"shortest_edge": (2 * side) ** 2, "longest_edge": (4 * side) ** 2},
    )
    return transformers.HunYuanVLProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=HUNYUAN_OCR_TEMPLATE
    )


def _model(tokenizer: Any) -> Any:
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.HunYuanVLConfig(
        text_config=text_config(
            tokenizer,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            # (position, width, height, image index) halves of a 16-wide head.
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 2, 2, 2]},
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            patch_size=PATCH,
            spatial_merge_size=MERGE,
            max_image_size=8 * PATCH,
            out_hidden_size=32,
        ),
        image_token_id=ids(MEDIA_TOKENS["image_token"]),
        im_start_id=ids(MEDIA_TOKENS["image_start_token"]),
        im_end_id=ids(MEDIA_TOKENS["image_end_token"]),
    )
    return transformers.HunYuanVLForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "hunyuan-vl",
        HUNYUAN_SPECIAL,
        _build,
        "tencent/HunyuanOCR",
        pad=PAD,
        bos=BOS,
        eos=EOS,
        extra=dict(MEDIA_TOKENS),
        end_of_turn=EOS,
        model=_model,
    ),
)
