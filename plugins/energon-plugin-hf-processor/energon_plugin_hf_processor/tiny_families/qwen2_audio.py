"""Qwen2-Audio (``Qwen/Qwen2-Audio-7B-Instruct``): Whisper log-mel features (128 bins, 30 s
window), each clip ``<|audio_bos|>`` + one ``<|AUDIO|>`` per 40 ms + ``<|audio_eos|>``;
``input_features`` and ``feature_attention_mask`` go to the model."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen2-Audio's tokens in id order (151643..151648): Qwen2's three, then the audio ones.
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")


def build(tokenizer: Any) -> Any:
    """The processor: Whisper's feature extractor as the checkpoint configures it (128 mel
    bins, 16 kHz, 30 s) and the chat template transformers ships with the processor class
    (the checkpoint's, with ``{"type": "audio"}`` parts recognised)."""
    import transformers

    features = transformers.WhisperFeatureExtractor(
        feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400
    )
    return transformers.Qwen2AudioProcessor(feature_extractor=features, tokenizer=tokenizer)


def model(tokenizer: Any) -> Any:
    """A random ``Qwen2AudioForConditionalGeneration`` (one-layer Whisper-style encoder, Qwen2
    text model; hidden 32)."""
    import transformers

    config = transformers.Qwen2AudioConfig(
        audio_config=dict(
            model_type="qwen2_audio_encoder",
            num_mel_bins=128,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            d_model=32,
            max_source_positions=1500,
        ),
        text_config=text_config(tokenizer, model_type="qwen2", head_dim=None),
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )
    return transformers.Qwen2AudioForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "qwen2-audio",
        SPECIAL,
        build,
        "Qwen/Qwen2-Audio-7B-Instruct",
        pad="<|endoftext|>",
        eos="<|endoftext|>",
        extra={
            "audio_token": "<|AUDIO|>",
            "audio_bos_token": "<|audio_bos|>",
            "audio_eos_token": "<|audio_eos|>",
        },
        end_of_turn="<|im_end|>",
        model=model,
        media=("audio",),
    ),
)
