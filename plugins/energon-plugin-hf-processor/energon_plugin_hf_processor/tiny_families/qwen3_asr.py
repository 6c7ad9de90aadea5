"""Qwen3-ASR (``Qwen/Qwen3-ASR-1.7B``): 128-bin log-mel features padded to whole 100-frame
windows (a call's clips to the longest), one clip per text, written ``<|audio_start|>`` + one
``<|audio_pad|>`` per 13 of a window's frames (the rest by three stride-2 stages) +
``<|audio_end|>``; ``input_features`` and ``input_features_mask`` go to the model."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen3's (<|endoftext|> 151643, <|im_start|> 151644, <|im_end|> 151645), then the audio span's
# tokens (<|audio_start|>, <|audio_end|>, and <|audio_pad|> 151676, the config's audio_token_id).
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>")

# The processor chat template transformers' convert_qwen3_asr_to_hf.py writes (ASR_CHAT_TEMPLATE):
# one system turn of every system text, one user turn of every audio's placeholder (user text
# is not written), then the assistant turns in generation markers.
# fmt: off
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system_text='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- if m.content is string -%}"
    "{%- set ns.system_text = ns.system_text + m.content -%}"
    "{%- else -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns.system_text = ns.system_text + c.text -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- set ns2 = namespace(audio_tokens='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.content is not string -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'audio' or ('audio' in c) or ('audio_url' in c) -%}"
    "{%- set ns2.audio_tokens = ns2.audio_tokens + '<|audio_start|><|audio_pad|><|audio_end|>' -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + ns.system_text + '<|im_end|>\\n' -}}"
    "{{- '<|im_start|>user\\n' + ns2.audio_tokens + '<|im_end|>\\n' -}}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{%- set ns3 = namespace(assistant_text='') -%}"
    "{%- if m.content is string -%}"
    "{%- set ns3.assistant_text = m.content -%}"
    "{%- else -%}"
    "{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns3.assistant_text = ns3.assistant_text + c.text -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{% generation %}"
    "{{- ns3.assistant_text + '<|im_end|>\\n' -}}"
    "{% endgeneration %}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)
# fmt: on


def build(tokenizer: Any) -> Any:
    """The processor: the conversion's ``Qwen3ASRFeatureExtractor()`` (128 mel bins, 16 kHz,
    100-frame windows) and the checkpoint's chat template."""
    import transformers

    return transformers.Qwen3ASRProcessor(
        feature_extractor=transformers.Qwen3ASRFeatureExtractor(),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``Qwen3ASRForConditionalGeneration`` (a one-layer audio encoder of hidden 32
    on 100-frame windows, a Qwen3 text model of hidden 32)."""
    import transformers

    config = transformers.Qwen3ASRConfig(
        audio_config=dict(
            model_type="qwen3_asr_encoder",
            num_mel_bins=128,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            d_model=32,
            output_dim=32,
            downsample_hidden_size=8,
        ),
        text_config=text_config(tokenizer, model_type="qwen3"),
        audio_token_id=tokenizer.convert_tokens_to_ids("<|audio_pad|>"),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return transformers.Qwen3ASRForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "qwen3-asr",
        SPECIAL,
        build,
        "Qwen/Qwen3-ASR-1.7B",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={
            "audio_token": "<|audio_pad|>",
            "audio_bos_token": "<|audio_start|>",
            "audio_eos_token": "<|audio_end|>",
        },
        end_of_turn="<|im_end|>",
        model=model,
        media=("audio",),
    ),
)
