"""Janus (``deepseek-community/Janus-Pro-1B``), image understanding: one SigLIP image per
``<image_placeholder>``, expanded between ``<begin_of_image>`` / ``<end_of_image>``; the
processor puts its default system prompt before every text."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# The chat template transformers' conversion (convert_janus_weights_to_hf.py) gives the
# checkpoint: "<|User|>: " / "<|Assistant|>: " turns; a user turn ends in a blank line, an
# answer in <｜end▁of▁sentence｜> only when another turn follows it.
CHAT_TEMPLATE = (
    "{%set seps=['\n\n','<\uff5cend\u2581of\u2581sentence\uff5c>']%}"
    "{%set i=0%}"
    "{%for message in messages%}"
    "{%if message['role']|lower=='user'%}"
    "<|User|>: "
    "{%elif message['role']|lower=='assistant'%}"
    "<|Assistant|>:{%if not (loop.last and not add_generation_prompt and "
    "message['content'][0]['type']=='text' and message['content'][0]['text']=='')%} {%endif%}"
    "{%else%}"
    "{{message['role'].capitalize()}}: "
    "{%endif%}"
    "{%for content in message['content']%}"
    "{%if content['type']=='image'%}"
    "{%if not loop.first%}{{'\n'}}{%endif%}"
    "<image_placeholder>"
    "{%if not loop.last%}{{'\n'}}{%endif%}"
    "{%elif content['type']=='text'%}"
    "{%set text=content['text']%}"
    "{%if loop.first%}{%set text=text.lstrip()%}{%endif%}"
    "{%if loop.last%}{%set text=text.rstrip()%}{%endif%}"
    "{%if not loop.first and message['content'][loop.index0-1]['type']=='text'%}"
    "{{' '+text}}"
    "{%else%}"
    "{{text}}"
    "{%endif%}"
    "{%endif%}"
    "{%endfor%}"
    "{%if not loop.last or add_generation_prompt%}"
    "{%if message['role']|lower=='user'%}"
    "{{seps[0]}}"
    "{%else%}"
    "{{seps[1]}}"
    "{%endif%}"
    "{%endif%}"
    "{%endfor%}"
    "{%if add_generation_prompt%}<|Assistant|>:{%endif%}"
)

BOS, EOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
PAD = "<\uff5c\u2581pad\u2581\uff5c>"
SPECIAL = (
    BOS,
    EOS,
    PAD,
    "<image_placeholder>",
    "<begin_of_image>",
    "<end_of_image>",
    "<|User|>",
    "<|Assistant|>",
)


def build(tokenizer: Any) -> Any:
    """The processor: 32x32 images (padded to a square) of 16-pixel patches, 4 tokens each,
    with the default system prompt (as the conversion saves it)."""
    import transformers

    image = transformers.JanusImageProcessor(size={"height": 32, "width": 32})
    return transformers.JanusProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        use_default_system_prompt=True,
        num_image_tokens=4,
    )


def model(tokenizer: Any) -> Any:
    """A random ``JanusForConditionalGeneration`` (SigLIP 32x32, Llama text, a tiny VQ-VAE)."""
    import transformers

    config = transformers.JanusConfig(
        text_config=text_config(tokenizer, model_type="llama"),
        vision_config=vision_config(
            intermediate_size=None,  # JanusVisionConfig sizes its MLP by mlp_ratio
            image_size=32,
            patch_size=16,
            mlp_ratio=2,
            projection_dim=32,
            depth=1,
            num_image_tokens=4,
        ),
        vq_config=dict(
            embed_dim=4,
            num_embeddings=16,
            latent_channels=32,
            base_channels=32,
            channel_multiplier=[1],
            num_res_blocks=1,
            num_patches=2,
            projection_dim=32,
            num_hidden_layers=1,
            image_token_embed_dim=32,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<image_placeholder>"),
    )
    return transformers.JanusForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "janus",
        SPECIAL,
        build,
        "deepseek-community/Janus-Pro-1B",
        pad=PAD,
        bos=BOS,
        eos=EOS,
        extra={
            "image_token": "<image_placeholder>",
            "boi_token": "<begin_of_image>",
            "eoi_token": "<end_of_image>",
        },
        end_of_turn="",
        model=model,
    ),
)
