"""Audio Flamingo 3 (``nvidia/audio-flamingo-3-hf``): Whisper log-mel features (128 bins, 30 s
windows), one clip per text, written as one ``<sound>`` per 40 ms before the turn's text;
``input_features`` and ``input_features_mask`` go to the model."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen2.5's three (151643..151645), then the sound token (151669, the config's audio_token_id).
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<sound>")


def flamingo_template(system_prompt: str) -> str:
    """The processor chat template transformers' conversion scripts write for the Flamingo
    checkpoints (convert_audioflamingo3_to_hf.py, convert_musicflamingo_to_hf.py), with the
    default ``system_prompt``: a message's audio parts become one ``<sound>`` before all its
    text (so one clip per text)."""
    # fmt: off
    return (
        "{% if messages[0]['role'] != 'system' %}"
            "<|im_start|>system\n" + system_prompt + "<|im_end|>\n"
        "{% endif %}"
        "{% for m in messages if m['content'] is not none %}"
            "<|im_start|>{{ m['role'] }}\n"
            "{% if m['content'] is string %}"
                "{{ m['content'] }}"
            "{% else %}"
                "{% set audio = namespace(found=False) %}"
                "{% set text_buf = namespace(v='') %}"
                "{% for c in m['content'] %}"
                    "{% if c.get('type') == 'audio' or 'audio' in c %}"
                        "{% set audio.found = True %}"
                    "{% elif c.get('type') == 'text' or 'text' in c %}"
                        "{% set text_buf.v = text_buf.v + c['text'] %}"
                    "{% endif %}"
                "{% endfor %}"
                "{% if audio.found %}{{ '<sound>' }}{% endif %}{{ text_buf.v }}"
            "{% endif %}"
            "<|im_end|>\n"
        "{% endfor %}"
        "{% if add_generation_prompt %}"
            "<|im_start|>assistant\n"
        "{% endif %}"
    )
    # fmt: on


CHAT_TEMPLATE = flamingo_template("You are a helpful assistant.")


def whisper_features() -> Any:
    """Whisper's feature extractor as the Flamingo conversions configure it (128 mel bins,
    16 kHz, 30 s windows, frame masks)."""
    import transformers

    return transformers.WhisperFeatureExtractor(feature_size=128, return_attention_mask=True)


def build(tokenizer: Any) -> Any:
    """The processor: :func:`whisper_features` and the checkpoint's chat template."""
    import transformers

    return transformers.AudioFlamingo3Processor(
        feature_extractor=whisper_features(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def encoder_config() -> dict[str, Any]:
    """A one-layer Whisper-style audio encoder of hidden 32 (the Flamingos' shared tower)."""
    return dict(
        model_type="audioflamingo3_encoder",
        num_mel_bins=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_size=32,
        max_source_positions=1500,
    )


def model(tokenizer: Any) -> Any:
    """A random ``AudioFlamingo3ForConditionalGeneration`` (:func:`encoder_config`, a Qwen2 text
    model of hidden 32)."""
    import transformers

    config = transformers.AudioFlamingo3Config(
        audio_config=encoder_config(),
        text_config=text_config(tokenizer, model_type="qwen2", head_dim=None),
        audio_token_id=tokenizer.convert_tokens_to_ids("<sound>"),
    )
    return transformers.AudioFlamingo3ForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "audioflamingo3",
        SPECIAL,
        build,
        "nvidia/audio-flamingo-3-hf",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={"audio_token": "<sound>"},
        end_of_turn="<|im_end|>",
        model=model,
        media=("audio",),
    ),
)
