"""Video-LLaVA (``LanguageBind/Video-LLaVA-7B-hf``): one CLIP crop per image
(``pixel_values_images``), ``(videos, frames, C, H, W)`` pixels per video, every patch and the
class token of each frame kept."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec
from energon_plugin_hf_processor.tiny_templates import VICUNA_VIDEO

# LanguageBind/Video-LLaVA-7B-hf chat_template.json is Vicuna v1 with images, then videos, then text.
CHAT_TEMPLATE = VICUNA_VIDEO

# Vicuna's tokens, then the two the conversion adds (<image> 32000, <video> 32001) and <pad>.
SPECIAL = ("<unk>", "<s>", "</s>", "<image>", "<video>", "<pad>")


def build(tokenizer: Any) -> Any:
    """The processor: 28x28 crops of 14-pixel patches (4 tokens per image, 5 per frame)."""
    import transformers

    image = transformers.VideoLlavaImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )
    video = transformers.VideoLlavaVideoProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
    )
    return transformers.VideoLlavaProcessor(
        image_processor=image,
        video_processor=video,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``VideoLlavaForConditionalGeneration`` (CLIP 28x28 image and video towers)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.VideoLlavaConfig(
        text_config=text_config(tokenizer, model_type="llama"),
        vision_config=vision_config(model_type="clip_vision_model", projection_dim=32),
        image_token_index=ids("<image>"),
        video_token_index=ids("<video>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return transformers.VideoLlavaForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "video-llava",
        SPECIAL,
        build,
        "LanguageBind/Video-LLaVA-7B-hf",
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
