"""GLM-ASR (``zai-org/GLM-ASR-Nano-2512``): Whisper log-mel features (128 bins, 30 s windows),
one clip per text, written ``<|begin_of_audio|>`` + one ``<|pad|>`` per 4 encoder frames +
``<|end_of_audio|>``; ``input_features`` and ``input_features_mask`` go to the model."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# GLM-Edge's tokens in id order (59246..): the checkpoint's config names 59246 (<|endoftext|>),
# 59253 (<|user|>) and 59255 (<|observation|>) as eos and 59260 (<|pad|>) as the audio token.
SPECIAL = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|pad|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
)

# The checkpoint's chat template, as transformers' convert_glmasr_weights_to_hf.py writes it:
# an audio part is the placeholder and a second <|user|>; no token closes an answer.
CHAT_TEMPLATE = """{%- macro to_text(content) -%}
{%- if content is string -%}
{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for item in content -%}
{%- if item is mapping and item.type == 'text' and item.text is defined -%}
{{- item.text -}}
{%- elif item is mapping and (item.type == 'audio' or 'audio' in item) -%}
<|begin_of_audio|><|pad|><|end_of_audio|><|user|>
{% elif item is string -%}
{{- item -}}
{%- endif -%}
{%- endfor -%}
{%- else -%}
{{- content -}}
{%- endif -%}
{%- endmacro -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
<|system|>
{{ to_text(m.content) | trim }}
{%- elif m.role == 'user' -%}
<|user|>
{{ to_text(m.content) | trim }}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{{ to_text(m.content) | trim }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|>
{% endif -%}"""


def build(tokenizer: Any) -> Any:
    """The processor: Whisper's feature extractor as the checkpoint configures it (128 mel
    bins, 16 kHz, 30 s windows) and the checkpoint's chat template."""
    import transformers

    features = transformers.WhisperFeatureExtractor(
        feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400
    )
    return transformers.GlmAsrProcessor(
        feature_extractor=features, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def model(tokenizer: Any) -> Any:
    """A random ``GlmAsrForConditionalGeneration`` (one-layer encoder of hidden 32, whose four
    merged frames make the projector's 128 inputs; a Llama text model of hidden 32)."""
    import transformers

    config = transformers.GlmAsrConfig(
        audio_config=dict(
            model_type="glmasr_encoder",
            hidden_size=32,
            intermediate_size=128,  # 4 merged frames of 32
            num_hidden_layers=1,
            num_attention_heads=2,
            num_mel_bins=128,
        ),
        text_config=text_config(tokenizer, model_type="llama", eos_token_id=tokenizer.eos_token_id),
        audio_token_id=tokenizer.convert_tokens_to_ids("<|pad|>"),
    )
    return transformers.GlmAsrForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "glmasr",
        SPECIAL,
        build,
        "zai-org/GLM-ASR-Nano-2512",
        pad="<|endoftext|>",  # the conversion sets pad to eos
        eos="<|endoftext|>",
        extra={"audio_token": "<|pad|>"},
        model=model,
        media=("audio",),
    ),
)
