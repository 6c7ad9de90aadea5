"""Ovis2 (``thisisiron/Ovis2-1B-hf``): a thumbnail and the tiles of each image, each tile's
``<IMG_ATOM>`` tokens between ``<IMG_START>`` / ``<IMG_GRID>`` / ``<IMG_COL>`` /
``<IMG_ROW>`` / ``<IMG_END>`` indicators (embedded from the visual table)."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# The chat template transformers' conversion (convert_ovis2_weights_to_hf.py) gives the
# checkpoint: ChatML with a fixed system turn, an image as "<image>\n".
CHAT_TEMPLATE = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<image>\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{'<|im_end|>\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\n' }}"
    "{% endif %}"
)

# Qwen2's tokens, then the six the conversion adds (<IMG_ATOM> is the image embedding token).
INDICATORS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<IMG_ATOM>", *INDICATORS)


def build(tokenizer: Any) -> Any:
    """The processor: 56x56 tiles (up to 4 and a thumbnail), 4 ``<IMG_ATOM>`` per tile."""
    import transformers

    image = transformers.Ovis2ImageProcessor(
        size={"height": 56, "width": 56}, crop_to_patches=True, max_patches=4
    )
    return transformers.Ovis2Processor(
        image_processor=image, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE, image_seq_length=4
    )


def model(tokenizer: Any) -> Any:
    """A random ``Ovis2ForConditionalGeneration`` (56x56 tiles of 14-pixel patches, merged
    2x2; Qwen2 text)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.Ovis2Config(
        text_config=text_config(tokenizer, model_type="qwen2"),
        vision_config=vision_config(image_size=56, hidden_stride=2, vocab_size=64),
        image_token_id=ids("<IMG_ATOM>"),
        visual_indicator_token_ids=[ids(t) for t in INDICATORS],
        vocab_size=len(tokenizer),
        hidden_size=32,
    )
    return transformers.Ovis2ForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "ovis2",
        SPECIAL,
        build,
        "thisisiron/Ovis2-1B-hf",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={"image_token": "<IMG_ATOM>"},
        end_of_turn="<|im_end|>",
        model=model,
    ),
)
