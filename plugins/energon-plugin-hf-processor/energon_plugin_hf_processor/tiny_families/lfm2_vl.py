"""LFM2-VL (``LiquidAI/LFM2-VL-1.6B``): ``Lfm2VlProcessor``, images.

ChatML turns after the bos (``<|startoftext|>``), answers closed by ``<|im_end|>``. An image
is ``<|image_start|>`` + its ``<image>`` tokens + ``<|image_end|>``; a large one is split into
tiles, each after its ``<|img_row_R_col_C|>`` token, then ``<|img_thumbnail|>`` and the
whole image. Every tile (and thumbnail) is one row of ``pixel_values``: its patches, zero-
padded to ``max_num_patches``, with ``pixel_attention_mask`` and ``spatial_shapes``.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# LiquidAI/LFM2-VL chat template (tokenizer_config.json; the one transformers' processor
# tests use).
LFM2_VL_TEMPLATE = (
    "{{bos_token}}{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<image>' }}"
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

_ROW_COL = tuple(f"<|img_row_{i + 1}_col_{j + 1}|>" for i in range(2) for j in range(2))

LFM2_VL_SPECIAL = (
    "<|pad|>",
    "<|startoftext|>",
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<image>",
    "<|image_start|>",
    "<|image_end|>",
    "<|img_thumbnail|>",
    *_ROW_COL,
)

TILE = 28
PATCH = 7


def _build(tokenizer: Any) -> Any:
    import transformers

    image = transformers.Lfm2VlImageProcessor(
        tile_size=TILE,
        size={"height": TILE, "width": TILE},
        encoder_patch_size=PATCH,
        downsample_factor=2,
        min_tiles=2,
        max_tiles=4,
        min_image_tokens=1,
        max_image_tokens=4,
    )
    return transformers.Lfm2VlProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=LFM2_VL_TEMPLATE
    )


def _model(tokenizer: Any) -> Any:
    import transformers

    config = transformers.Lfm2VlConfig(
        text_config=text_config(
            tokenizer,
            head_dim=None,
            block_ff_dim=64,
            num_hidden_layers=2,
            layer_types=["conv", "full_attention"],
        ),
        vision_config=vision_config(
            image_size=None,  # SigLIP2 is sized by num_patches
            patch_size=PATCH,
            num_patches=64,
            vision_use_head=False,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        projector_hidden_size=32,
        downsample_factor=2,
    )
    return transformers.Lfm2VlForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "lfm2-vl",
        LFM2_VL_SPECIAL,
        _build,
        "LiquidAI/LFM2-VL-1.6B",
        pad="<|pad|>",
        bos="<|startoftext|>",
        eos="<|im_end|>",
        extra={
            "image_token": "<image>",
            "image_start_token": "<|image_start|>",
            "image_end_token": "<|image_end|>",
            "image_thumbnail_token": "<|img_thumbnail|>",
        },
        end_of_turn="<|im_end|>",
        model=_model,
    ),
)
