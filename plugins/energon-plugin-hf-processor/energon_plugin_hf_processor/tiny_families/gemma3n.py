"""Gemma 3n (``google/gemma-3n-E4B-it``): ``Gemma3nProcessor``, images and audio.

Gemma 3 turns (``<start_of_turn>role`` ... ``<end_of_turn>``); an image is
``\\n\\n<start_of_image>`` + a fixed count of ``<image_soft_token>`` + ``<end_of_image>\\n\\n``,
an audio clip likewise ``<start_of_audio>`` + a fixed 188 ``<audio_soft_token>`` (a 30-second
window; the model pads a shorter clip's features to that count) + ``<end_of_audio>``.
``token_type_ids`` mark the image and audio tokens.

The model embeds every id from its text vocabulary's end on with the vision and audio
embedders (``<end_of_image>``, ``<image_soft_token>``, then ``<end_of_audio>``,
``<audio_soft_token>``: ids 262144, 262145, 262272, 262273 in the checkpoint). The tiny
tokenizer keeps that layout: those four tokens are its ``extra`` special tokens, which the
tokenizer appends after its vocabulary in that order, and the tiny model's vision and audio
vocabularies (two ids each) start there.

The tiny model's vision tower is a ``timm`` MobileNetV5 encoder (``TimmWrapperModel``, as the
checkpoints'), built offline (``pretrained=False``) from two tiny blocks on 32x32 images, its
multi-scale fusion pooled to 2x2 (4 soft tokens an image); it needs the ``timm`` package (a
dev dependency). Audio and text are one-layer Gemma 3n towers.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import TEXT_SIZES, text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# google/gemma-3n-E4B-it chat template (tokenizer_config.json's chat_template, as the GGUF
# conversions print it): Gemma 3's, with audio and image parts as their soft tokens.
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'audio' -%}
                {{ '<audio_soft_token>' }}
            {%- elif item['type'] == 'image' -%}
                {{ '<image_soft_token>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

# The checkpoint's control tokens below its multimodal ones, in its id order (<pad> 0,
# <eos> 1, <bos> 2, <unk> 3, <mask> 4, <start_of_turn> 105, <end_of_turn> 106,
# <start_of_image> 255999, <start_of_audio> 256000).
SPECIAL = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<start_of_audio>",
)
# Appended after the vocabulary in this order (see the module docstring): the vision
# embedder's two ids, then the audio embedder's.
MULTIMODAL_TOKENS = {
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
    "eoa_token": "<end_of_audio>",
    "audio_token": "<audio_soft_token>",
}
IMAGE_SIDE = 32
IMAGE_TOKENS_SIDE = 2  # the fused features pooled to 2x2
AUDIO_SOFT_TOKENS = 188  # the checkpoint's: Gemma3nProcessor pads every clip to 30 s
# MobileNetV5 blocks (timm's arch strings): 32 -> 16 (stem) -> 8 -> 4.
VISION_BLOCKS = (("er_r1_k3_s2_e4_c8",), ("uir_r1_a3_k5_s2_e4_c16",))
VISION_HIDDEN = 2048  # MobileNetV5Encoder's fusion output width (fixed in timm)


def build(tokenizer: Any) -> Any:
    """The processor: SigLIP image processor at 32x32 (4 soft tokens), Gemma 3n audio features."""
    import transformers

    image = transformers.SiglipImageProcessor(size={"height": IMAGE_SIDE, "width": IMAGE_SIDE})
    return transformers.Gemma3nProcessor(
        feature_extractor=transformers.Gemma3nAudioFeatureExtractor(),
        image_processor=image,
        tokenizer=tokenizer,
        image_seq_length=IMAGE_TOKENS_SIDE**2,
        audio_seq_length=AUDIO_SOFT_TOKENS,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``Gemma3nForConditionalGeneration``: a two-block MobileNetV5 (timm), one-layer
    audio conformer and text decoder, vision and audio vocabularies after the text ones."""
    import transformers
    from timm.models._efficientnet_builder import decode_arch_def

    ids = tokenizer.convert_tokens_to_ids
    vision_offset = ids(MULTIMODAL_TOKENS["eoi_token"])
    audio_offset = ids(MULTIMODAL_TOKENS["eoa_token"])
    vision = dict(
        architecture="mobilenetv5_300m_enc",  # TimmWrapperModel creates it with pretrained=False
        hidden_size=VISION_HIDDEN,
        vocab_size=audio_offset - vision_offset,
        vocab_offset=vision_offset,
        model_args=dict(
            block_args=decode_arch_def([list(stage) for stage in VISION_BLOCKS]),
            msfa_output_resolution=IMAGE_TOKENS_SIDE,
        ),
    )
    audio = dict(
        vocab_size=len(tokenizer) - audio_offset,
        vocab_offset=audio_offset,
        hidden_size=TEXT_SIZES["hidden_size"],
        conf_num_attention_heads=TEXT_SIZES["num_attention_heads"],
        conf_num_hidden_layers=1,
        sscp_conv_channel_size=(8, 8),
    )
    text = text_config(
        tokenizer,
        vocab_size_per_layer_input=vision_offset,
        hidden_size_per_layer_input=8,
        layer_types=["full_attention"],
        num_kv_shared_layers=0,
        laurel_rank=4,
        altup_num_inputs=2,
        activation_sparsity_pattern=[0.0],
    )
    config = transformers.Gemma3nConfig(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        vision_soft_tokens_per_image=IMAGE_TOKENS_SIDE**2,
        audio_soft_tokens_per_image=AUDIO_SOFT_TOKENS,
        boi_token_id=ids("<start_of_image>"),
        eoi_token_id=vision_offset,
        image_token_id=ids(MULTIMODAL_TOKENS["image_token"]),
        boa_token_id=ids("<start_of_audio>"),
        eoa_token_id=audio_offset,
        audio_token_id=ids(MULTIMODAL_TOKENS["audio_token"]),
    )
    return transformers.Gemma3nForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "gemma3n",
        SPECIAL,
        build,
        "google/gemma-3n-E4B-it",
        pad="<pad>",
        bos="<bos>",
        eos="<eos>",
        unk="<unk>",
        extra={**MULTIMODAL_TOKENS, "boi_token": "<start_of_image>", "boa_token": "<start_of_audio>"},
        end_of_turn="<end_of_turn>",
        model=model,
        media=("image", "audio"),
    ),
)
