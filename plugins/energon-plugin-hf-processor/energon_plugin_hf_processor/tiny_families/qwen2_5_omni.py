"""Qwen2.5-Omni (``Qwen/Qwen2.5-Omni-7B``): Qwen2-VL patches for images and videos
(``<|IMAGE|>`` / ``<|VIDEO|>`` between ``<|vision_bos|>`` and ``<|vision_eos|>``) and
Whisper log-mel features for audio (``<|AUDIO|>`` between ``<|audio_bos|>`` and
``<|audio_eos|>``, one per 40 ms); the thinker takes ``input_features`` and
``feature_attention_mask`` beside the vision inputs."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen/Qwen2.5-Omni-7B chat_template.json (images, audio and videos as typed parts; a
# default system turn when the first message is not one).
CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
    "assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}{% if add_audio_id %}Audio "
    "{{ audio_count.value }}: {% endif %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# The checkpoint's added tokens in id order (<|endoftext|> 151643 ... <|AUDIO|> 151646,
# <|audio_bos|> 151647, <|audio_eos|> 151648, <|vision_bos|> 151652 ... <|VIDEO|> 151656).
SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|AUDIO|>",
    "<|audio_bos|>",
    "<|audio_eos|>",
    "<|vision_bos|>",
    "<|vision_eos|>",
    "<|vision_pad|>",
    "<|IMAGE|>",
    "<|VIDEO|>",
)
PATCH = 14


def omni_inputs(patch: int) -> tuple[Any, Any, Any]:
    """The image and video processors (Qwen2-VL's, ``patch``-pixel patches, at most 16 merged
    tokens per image or frame pair) and the Whisper feature extractor (128 mel bins, 16 kHz,
    30 s) of a Qwen-Omni processor."""
    import transformers

    edges = {"shortest_edge": (2 * patch) ** 2, "longest_edge": (2 * patch) ** 2 * 16}
    image = transformers.Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=edges["shortest_edge"],
        max_pixels=edges["longest_edge"],
    )
    video = transformers.Qwen2VLVideoProcessor(
        patch_size=patch, merge_size=2, temporal_patch_size=2, size=edges
    )
    features = transformers.WhisperFeatureExtractor(
        feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400
    )
    return image, video, features


def build(tokenizer: Any) -> Any:
    """The processor: :func:`omni_inputs` with 14-pixel patches and the checkpoint's template."""
    import transformers

    image, video, features = omni_inputs(PATCH)
    return transformers.Qwen2_5OmniProcessor(
        image_processor=image,
        video_processor=video,
        feature_extractor=features,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``Qwen2_5OmniThinkerForConditionalGeneration`` (the text-out part of the
    model: one-layer vision and audio encoders, one-layer text model; hidden 32)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.Qwen2_5OmniThinkerConfig(
        audio_config=dict(
            num_mel_bins=128,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            d_model=32,
            output_dim=32,
            n_window=100,
        ),
        vision_config=dict(
            depth=1,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=PATCH,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=56,
            out_hidden_size=32,
            fullatt_block_indexes=[0],
        ),
        text_config=text_config(
            tokenizer,
            head_dim=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
        ),
        audio_token_index=ids("<|AUDIO|>"),
        image_token_index=ids("<|IMAGE|>"),
        video_token_index=ids("<|VIDEO|>"),
        audio_start_token_id=ids("<|audio_bos|>"),
        audio_end_token_id=ids("<|audio_eos|>"),
        vision_start_token_id=ids("<|vision_bos|>"),
        vision_end_token_id=ids("<|vision_eos|>"),
    )
    return transformers.Qwen2_5OmniThinkerForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "qwen2.5-omni",
        SPECIAL,
        build,
        "Qwen/Qwen2.5-Omni-7B",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={
            "image_token": "<|IMAGE|>",
            "audio_token": "<|AUDIO|>",
            "video_token": "<|VIDEO|>",
            "vision_bos_token": "<|vision_bos|>",
            "vision_eos_token": "<|vision_eos|>",
            "audio_bos_token": "<|audio_bos|>",
            "audio_eos_token": "<|audio_eos|>",
        },
        end_of_turn="<|im_end|>",
        model=model,
        media=("image", "video", "audio"),
    ),
)
