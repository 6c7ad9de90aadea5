"""Gemma 4 Unified (``gemma4_unified``; ``google/gemma-4-12B-it``): Gemma 4's inputs for an
encoder-free model. Aspect-preserving patches padded to a fixed count per image (with their
2-D positions), ``<|image>`` + soft tokens + ``<image|>`` per image, videos as time-stamped
frames of ``<|video|>`` soft tokens, and audio as raw waveform frames (one ``<|audio|>`` per
frame, no mel features) between ``<|audio>`` and ``<audio|>``; ``mm_token_type_ids``."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_families.gemma4 import CHAT_TEMPLATE, SPECIAL
from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# The checkpoint ships Gemma 4's chat template (<|turn>role ... <turn|>, "\n\n<|image|>\n\n",
# "<|audio|>", "\n\n<|video|>\n\n", the empty thought channel after the generation prompt)
# and Gemma 4's control tokens at the same ids (its config's defaults: <|image> 255999,
# <|audio> 256000, <|image|> 258880, <|audio|> 258881, <image|> 258882, <audio|> 258883,
# <|video|> 258884), so both are shared with :mod:`.gemma4`.

# 4-pixel patches, 3x3 pooling: at most 70 soft tokens per image or frame (as Gemma 4's).
PATCH_SIZE = 4
POOLING = 3
SOFT_TOKENS = 70
#: Raw samples per audio soft token: 100 ms at 16 kHz (the checkpoint's 640 is 40 ms), so a
#: clip of a second takes 10 tokens.
SAMPLES_PER_TOKEN = 1600


def build(tokenizer: Any) -> Any:
    """The processor: Gemma 4 Unified's image, video and waveform-frame audio processors."""
    import transformers

    image = transformers.Gemma4UnifiedImageProcessor(
        patch_size=PATCH_SIZE, max_soft_tokens=SOFT_TOKENS, pooling_kernel_size=POOLING
    )
    video = transformers.Gemma4UnifiedVideoProcessor(
        patch_size=PATCH_SIZE, max_soft_tokens=SOFT_TOKENS, pooling_kernel_size=POOLING
    )
    audio = transformers.Gemma4UnifiedAudioFeatureExtractor(
        feature_size=SAMPLES_PER_TOKEN, audio_samples_per_token=SAMPLES_PER_TOKEN
    )
    return transformers.Gemma4UnifiedProcessor(
        feature_extractor=audio,
        image_processor=image,
        tokenizer=tokenizer,
        video_processor=video,
        image_seq_length=SOFT_TOKENS,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``Gemma4UnifiedForConditionalGeneration``: one text layer of hidden 32, the
    patch and waveform-frame projections sized to the tiny processor."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.Gemma4UnifiedConfig(
        text_config=text_config(
            tokenizer,
            layer_types=["full_attention"],
            global_head_dim=16,
            sliding_window=64,
        ),
        vision_config=dict(
            patch_size=PATCH_SIZE,
            pooling_kernel_size=POOLING,
            mm_embed_dim=32,
            mm_posemb_size=64,
            output_proj_dims=32,
        ),
        audio_config=dict(audio_embed_dim=SAMPLES_PER_TOKEN),
        image_token_id=ids("<|image|>"),
        boi_token_id=ids("<|image>"),
        eoi_token_id=ids("<image|>"),
        video_token_id=ids("<|video|>"),
        audio_token_id=ids("<|audio|>"),
        boa_token_id=ids("<|audio>"),
        eoa_token_index=ids("<audio|>"),
    )
    return transformers.Gemma4UnifiedForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "gemma4-unified",
        SPECIAL,
        build,
        "google/gemma-4-12B-it",
        pad="<pad>",
        bos="<bos>",
        eos="<eos>",
        unk="<unk>",
        extra={
            "image_token": "<|image|>",
            "boi_token": "<|image>",
            "eoi_token": "<image|>",
            "audio_token": "<|audio|>",
            "boa_token": "<|audio>",
            "eoa_token": "<audio|>",
        },
        end_of_turn="<turn|>",
        model=model,
        media=("image", "video", "audio"),
    ),
)
