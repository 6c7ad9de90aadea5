"""LLaVA-NeXT-Video (``llava-hf/LLaVA-NeXT-Video-7B-hf``): LLaVA-NeXT tiles for images,
``(videos, frames, C, H, W)`` pixels for videos, 2x2-pooled per frame."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec
from energon_plugin_hf_processor.tiny_templates import VICUNA_VIDEO

# llava-hf/LLaVA-NeXT-Video-7B-hf chat_template.json is Vicuna v1 with images, then videos, then text.
CHAT_TEMPLATE = VICUNA_VIDEO

# Vicuna's tokens, then the two the conversion adds (<video> 32000, <image> 32001) and <pad>.
SPECIAL = ("<unk>", "<s>", "</s>", "<video>", "<image>", "<pad>")
PINPOINTS = [[28, 56], [56, 28], [56, 56]]


def build(tokenizer: Any) -> Any:
    """The processor: 28x28 tiles of 14-pixel patches (4 per tile), 28x28 frames (1 token each)."""
    import transformers

    image = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": 28},
        crop_size={"height": 28, "width": 28},
        image_grid_pinpoints=PINPOINTS,
    )
    video = transformers.LlavaNextVideoVideoProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )
    return transformers.LlavaNextVideoProcessor(
        video_processor=video,
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``LlavaNextVideoForConditionalGeneration`` (CLIP 28x28, Llama text)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.LlavaNextVideoConfig(
        text_config=text_config(tokenizer, model_type="llama"),
        vision_config=vision_config(model_type="clip_vision_model", num_hidden_layers=2, projection_dim=32),
        image_token_index=ids("<image>"),
        video_token_index=ids("<video>"),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return transformers.LlavaNextVideoForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "llava-next-video",
        SPECIAL,
        build,
        "llava-hf/LLaVA-NeXT-Video-7B-hf",
        pad="<pad>",
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        extra={"image_token": "<image>", "video_token": "<video>"},
        end_of_turn="",
        model=model,
        media=("image", "video"),
    ),
)
