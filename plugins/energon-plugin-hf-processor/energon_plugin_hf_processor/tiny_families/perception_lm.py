"""Perception LM (``facebook/Perception-LM-1B``): ``PerceptionLMProcessor``, images and videos.

Llama-3 turns (``<|start_header_id|>role<|end_header_id|>``, answers closed by
``<|eot_id|>``); a turn writes its images, then its videos, then its text. An image is a
thumbnail plus up to ``max_num_tiles`` tiles, each ``(tile / patch / pooling)^2``
``<|image|>`` tokens; a video is one tile per frame of ``<|video|>`` tokens. ``pixel_values``
is ``(images, tiles, C, H, W)``: the processor stacks the images of one call, so images with
different tile counts fail in transformers itself; the tiny processor keeps one tile besides
the thumbnail (``max_num_tiles=1``), as every image then has.

The tiny model's vision tower is a ``timm`` model (``TimmWrapperModel``, as the checkpoints'
Perception Encoder): a one-block PE ViT (timm's ``vit_pe_*`` family) built offline
(``pretrained=False``) with the tiny processor's tile and patch sizes; it needs the ``timm``
package (a dev dependency).
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import VISION_SIZES, text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# transformers' convert_perception_lm_weights_to_hf.py (CHAT_TEMPLATE), as the checkpoints ship it.
PERCEPTION_LM_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}"
    "    {%- set system_message = 'You are a helpful language and vision assistant. You are able to "
    "understand the visual content that the user provides, and assist the user with a variety of "
    "tasks using natural language.' %}"
    "{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- system_message }}"
    "{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<|image|>' }}"
    "{%- endfor %}"
    "{%- for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<|video|>' }}"
    "{%- endfor %}"
    "{%- for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{- content['text'] | trim }}"
    "{%- endfor %}"
    "{{'<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)

# The converter's DEFAULT_SPECIAL_TOKENS (the first ten; reserved ones left out).
PERCEPTION_LM_SPECIAL = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|image|>",
    "<|video|>",
    "<|reserved_special_token_2|>",
    "<|reserved_special_token_3|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|reserved_special_token_4|>",
    "<|eot_id|>",
)

TILE = 28
PATCH = 7


def _build(tokenizer: Any) -> Any:
    import transformers

    image = transformers.PerceptionLMImageProcessor(
        tile_size=TILE, max_num_tiles=1, size={"height": TILE, "width": TILE}
    )
    video = transformers.PerceptionLMVideoProcessor(size={"height": TILE, "width": TILE})
    return transformers.PerceptionLMProcessor(
        video_processor=video,
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=PATCH,
        pooling_ratio=2,
        chat_template=PERCEPTION_LM_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``PerceptionLMForConditionalGeneration``: a one-block PE ViT (timm) on 28x28
    tiles of 7x7 patches with a class token, 2x2 pooling (4 tokens a tile), Llama text."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    vision = dict(
        model_type="timm_wrapper",
        # A Perception Encoder ViT (timm's eva.py) at tiny sizes; TimmWrapperModel creates it
        # with pretrained=False, so nothing is downloaded.
        architecture="vit_pe_core_tiny_patch16_384",
        do_pooling=False,
        model_args=dict(
            img_size=TILE,
            patch_size=PATCH,
            embed_dim=VISION_SIZES["hidden_size"],
            depth=VISION_SIZES["num_hidden_layers"],
            num_heads=VISION_SIZES["num_attention_heads"],
            ref_feat_shape=(TILE // PATCH, TILE // PATCH),
            global_pool="",  # every token's features (the projector reads them), no pooling head
            use_post_transformer_norm=False,
        ),
    )
    config = transformers.PerceptionLMConfig(
        text_config=text_config(tokenizer, model_type="llama"),
        vision_config=vision,
        vision_use_cls_token=True,
        projector_pooling_ratio=2,
        image_token_id=ids("<|image|>"),
        video_token_id=ids("<|video|>"),
    )
    return transformers.PerceptionLMForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "perception-lm",
        PERCEPTION_LM_SPECIAL,
        _build,
        "facebook/Perception-LM-1B",
        pad="<|end_of_text|>",
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        extra={"image_token": "<|image|>", "video_token": "<|video|>"},
        end_of_turn="<|eot_id|>",
        model=model,
        media=("image", "video"),
    ),
)
