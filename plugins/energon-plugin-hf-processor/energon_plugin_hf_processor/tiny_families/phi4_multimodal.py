"""Phi-4-multimodal (``microsoft/Phi-4-multimodal-instruct``): images as a global view plus
up to ``dynamic_hd`` crops, each image one run of ``<|image|>`` tokens (the global view's
16x16 + 16 tokens, one separator, each crop's kept 2x2-pooled patches + one per row), and
audio as 80-bin log-mel frames, each clip one ``<|audio|>`` per 8 frames (80 ms). The model
takes ``image_pixel_values`` (images, crops, 3, H, W) with ``image_sizes`` and
``image_attention_mask``, and ``audio_input_features`` with ``audio_embed_sizes`` (and
``audio_attention_mask`` when a call has several clips)."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# microsoft/Phi-4-multimodal-instruct as transformers converts it (``processor.chat_template =
# tokenizer.chat_template``; the revision its tests load, the template its processor tests
# write): <|role|>content<|end|>, images and audio as typed parts, <|endoftext|> after the
# last turn unless a generation prompt follows.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}{{ '<|image|>' }}"
    "{% elif content['type'] == 'audio' %}{{ '<|audio|>' }}"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
    "{{ '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% endif %}{{ '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

# The checkpoint's special tokens in id order (<|endoftext|> 199999, <|image|> 200010,
# <|audio|> 200011, <|assistant|> 200019, <|end|> 200020, <|user|> 200021, <|system|> 200022,
# <|tool|> 200023, <|/tool|> 200024, <|tool_call|> 200025, <|/tool_call|> 200026,
# <|tool_response|> 200027, <|tag|> 200028).
SPECIAL = (
    "<|endoftext|>",
    "<|image|>",
    "<|audio|>",
    "<|assistant|>",
    "<|end|>",
    "<|user|>",
    "<|system|>",
    "<|tool|>",
    "<|/tool|>",
    "<|tool_call|>",
    "<|/tool_call|>",
    "<|tool_response|>",
    "<|tag|>",
)
# The checkpoint's 448-pixel crops of 14-pixel patches are 32x32 patches, the count the
# processor's token formula assumes (256 global tokens + 16 separators): tiny crops keep the
# 32x32 patches at 2 pixels each.
CROP = 64
PATCH = 2
MAX_CROPS = 4


def build(tokenizer: Any) -> Any:
    """The processor: Phi-4-multimodal's image processor with 64-pixel crops of 2-pixel
    patches (at most 4 crops per image) and the checkpoint's feature extractor (80 mel
    bins, 16 kHz, 10 ms hop, one token per 8 frames)."""
    import transformers

    image = transformers.Phi4MultimodalImageProcessor(
        size={"height": CROP, "width": CROP}, patch_size=PATCH, dynamic_hd=MAX_CROPS
    )
    return transformers.Phi4MultimodalProcessor(
        image_processor=image,
        audio_processor=transformers.Phi4MultimodalFeatureExtractor(),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``Phi4MultimodalForCausalLM`` (one-layer SigLIP-style vision tower on
    64-pixel crops, one-block conformer audio encoder, one-layer text model; hidden 32)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    text = text_config(tokenizer, head_dim=None)
    vision = vision_config(image_size=CROP, patch_size=PATCH, crop_size=CROP, image_token_id=ids("<|image|>"))
    audio = dict(
        hidden_size=32,
        intermediate_size=64,
        num_blocks=1,
        num_attention_heads=2,
        ext_pw_out_channel=32,
        depthwise_separable_out_channel=32,
        nemo_conv_channels=32,
        audio_token_id=ids("<|audio|>"),
    )
    config = transformers.Phi4MultimodalConfig(
        **text,
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=[ids("<|endoftext|>"), ids("<|end|>")],
        vision_config=vision,
        audio_config=audio,
    )
    return transformers.Phi4MultimodalForCausalLM(config)


SPECS = (
    TinySpec(
        "phi4-multimodal",
        SPECIAL,
        build,
        "microsoft/Phi-4-multimodal-instruct",
        pad="<|endoftext|>",
        bos="<|endoftext|>",
        eos="<|endoftext|>",
        unk="<|endoftext|>",
        extra={"image_token": "<|image|>", "audio_token": "<|audio|>"},
        end_of_turn="<|end|>",
        model=model,
        media=("image", "audio"),
    ),
)
