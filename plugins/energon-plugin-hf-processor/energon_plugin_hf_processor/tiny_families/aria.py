"""Aria (``rhymes-ai/Aria``): ``AriaProcessor``, images.

ChatML turns; an image is ``<fim_prefix><|img|><fim_suffix>``, its ``<|img|>`` expanded to
the projector's query count for the image size (``size_conversion``). Every image is
resized to ``max_image_size`` on its long side and zero-padded to a square: one row of
``pixel_values`` and of ``pixel_mask`` (the real pixels) per image (per crop when
``split_image``).
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# rhymes-ai/Aria chat template (the one transformers' conversion script
# convert_aria_weights_to_hf.py gives the checkpoint, and its processor tests use).
CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] is iterable %}{% for item in message['content'] %}"
    "{% if item['type'] == 'text' %}{{ item['text'] }}"
    "{% elif item['type'] == 'image' %}<fim_prefix><|img|><fim_suffix>{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SPECIAL = (
    "<unk>",
    "<pad>",
    "<|im_start|>",
    "<|im_end|>",
    "<fim_prefix>",
    "<fim_suffix>",
    "<|img|>",
)

IMAGE_SIZE = 980  # the processor's max_image_size (490 or 980; its call defaults to 980)
PATCH = 140  # 7 x 7 patches per image
QUERIES = 2  # the projector's queries (image tokens) per image


def build(tokenizer: Any) -> Any:
    """The processor: every image padded to 980 x 980, two ``<|img|>`` tokens each."""
    import transformers

    image = transformers.AriaImageProcessor(max_image_size=IMAGE_SIZE, min_image_size=PATCH)
    return transformers.AriaProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        size_conversion={IMAGE_SIZE: QUERIES},
    )


def model(tokenizer: Any) -> Any:
    """A random ``AriaForConditionalGeneration`` (Idefics3 vision of 140-pixel patches, a
    2-query projector, a 2-expert MoE text model)."""
    import transformers

    config = transformers.AriaConfig(
        text_config=text_config(tokenizer, moe_num_experts=2, moe_topk=1, moe_num_shared_experts=1),
        vision_config=vision_config(model_type="idefics3_vision", image_size=IMAGE_SIZE, patch_size=PATCH),
        projector_patch_to_query_dict={(IMAGE_SIZE // PATCH) ** 2: QUERIES},
        image_token_index=tokenizer.convert_tokens_to_ids("<|img|>"),
    )
    return transformers.AriaForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "aria",
        SPECIAL,
        build,
        "rhymes-ai/Aria",
        pad="<pad>",
        bos="<|im_start|>",
        eos="<|im_end|>",
        unk="<unk>",
        extra={"image_token": "<|img|>"},
        end_of_turn="<|im_end|>",
        model=model,
    ),
)
