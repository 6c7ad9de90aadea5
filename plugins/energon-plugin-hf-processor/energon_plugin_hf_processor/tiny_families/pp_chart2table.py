"""PP-Chart2Table (``PaddlePaddle/PP-Chart2Table_safetensors``): GOT-OCR2's model on a chart,
one image per user turn, its 256 ``<imgpad>`` tokens written by the chat template itself.

The template ignores what a user turn says: every user turn is ``<img>`` + 256 ``<imgpad>``
+ ``</img>`` and the fixed instruction ``Chart to table``; a system turn is dropped (the
template writes its own system text). The processor (``ProcessorMixin``'s call, no placeholder
expansion) raises without images, so the family keeps only samples with one image per user
turn (``FamilySpec.image_per_user_turn``: the others are skipped and counted).
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# PaddlePaddle/PP-Chart2Table_safetensors chat_template.jinja, as transformers' tiny processor
# fixture made from that checkpoint (hf-internal-testing/tiny-processor-pp_chart2table) holds it.
CHAT_TEMPLATE = (
    "{% set system_query = 'You should follow the instructions carefully and explain your answers "
    "in detail.' %}\n{% set num_patches = 16 %}\n<|im_start|>system\n{{ system_query }}<|im_end|>"
    "{% for message in messages %}{% if message['role'] == 'user' %}<|im_start|>user\n"
    "<img>{% for _ in range(num_patches * num_patches) %}<imgpad>{% endfor %}</img>\n"
    "Chart to table<|im_end|>{% elif message['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{{ message.get('content', '') }}<|im_end|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# GOT-OCR2's Qwen tokens: the chat markers and the image block's three.
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<imgpad>")

#: The image side: 64x64 pixels, a 64x64 patch grid (patch 1) that the projector's two
#: stride-2 convolutions bring to the template's 16x16 = 256 tokens.
IMAGE_SIZE = 64


def build(tokenizer: Any) -> Any:
    """The processor: every image resized to 64x64 (the checkpoint's is 1024x1024)."""
    import transformers

    image = transformers.PPChart2TableImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return transformers.PPChart2TableProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def model(tokenizer: Any) -> Any:
    """A random ``GotOcr2ForConditionalGeneration`` (transformers' model of PP-Chart2Table):
    a one-layer windowed SAM-like vision tower on a 64x64 grid, a one-layer Qwen2."""
    import transformers

    vision = dict(
        hidden_size=32,
        output_channels=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        mlp_dim=64,
        image_size=IMAGE_SIZE,
        patch_size=1,
        window_size=8,
        global_attn_indexes=[],
    )
    config = transformers.PPChart2TableConfig(
        text_config=text_config(tokenizer, model_type="qwen2"),
        vision_config=vision,
        image_token_index=tokenizer.convert_tokens_to_ids("<imgpad>"),
    )
    return transformers.GotOcr2ForConditionalGeneration(config)  # type: ignore[arg-type]  # as transformers does


SPECS = (
    TinySpec(
        "pp-chart2table",
        SPECIAL,
        build,
        "PaddlePaddle/PP-Chart2Table_safetensors",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={"image_token": "<imgpad>"},
        end_of_turn="<|im_end|>",
        model=model,
    ),
)
