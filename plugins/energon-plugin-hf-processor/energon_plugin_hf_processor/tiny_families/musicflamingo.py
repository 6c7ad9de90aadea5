"""Music Flamingo (``nvidia/music-flamingo-2601-hf``): Audio Flamingo 3's processor shape (one
clip per text, Whisper windows) with the clip's ``<sound>`` run between ``<|sound_bos|>`` and
``<|sound_eos|>``, and a rotary time embedding in the audio tower (built from the ids)."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_families.audioflamingo3 import (
    encoder_config,
    flamingo_template,
    whisper_features,
)
from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen2.5's three (151643..151645), then the sound tokens (151669..151671, the config's).
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<sound>", "<|sound_bos|>", "<|sound_eos|>")

# The default system prompt of transformers' convert_musicflamingo_to_hf.py, verbatim.
SYSTEM_PROMPT = (
    "You are Music Flamingo, a multimodal assistant for language and music. "
    "On each turn you receive an audio clip which contains music and optional text, "
    "you will receive at least one or both; use your world knowledge and reasoning "
    "to help the user with any task. Interpret the entirety of the content any input music"
    "--regardlenss of whether the user calls it audio, music, or sound."
)

CHAT_TEMPLATE = flamingo_template(SYSTEM_PROMPT)


def build(tokenizer: Any) -> Any:
    """The processor: Whisper's features as Audio Flamingo 3's and the checkpoint's template."""
    import transformers

    return transformers.MusicFlamingoProcessor(
        feature_extractor=whisper_features(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def model(tokenizer: Any) -> Any:
    """A random ``MusicFlamingoForConditionalGeneration`` (Audio Flamingo 3's tiny tower, a
    Qwen2 text model of hidden 32)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.MusicFlamingoConfig(
        audio_config=encoder_config(),
        text_config=text_config(tokenizer, model_type="qwen2", head_dim=None),
        audio_token_id=ids("<sound>"),
        audio_bos_token_id=ids("<|sound_bos|>"),
        audio_eos_token_id=ids("<|sound_eos|>"),
    )
    return transformers.MusicFlamingoForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "musicflamingo",
        SPECIAL,
        build,
        "nvidia/music-flamingo-2601-hf",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={
            "audio_token": "<sound>",
            "audio_bos_token": "<|sound_bos|>",
            "audio_eos_token": "<|sound_eos|>",
        },
        end_of_turn="<|im_end|>",
        model=model,
        media=("audio",),
    ),
)
