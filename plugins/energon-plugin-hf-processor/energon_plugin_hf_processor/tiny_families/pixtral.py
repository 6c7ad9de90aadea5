"""Pixtral (``mistral-community/pixtral-12b``): each image at its own size in 16-pixel patches,
one ``[IMG]`` per patch, ``[IMG_BREAK]`` after each row and ``[IMG_END]`` last; the batch's
pixels zero-padded to the largest image, with every image's ``image_sizes``."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# The Pixtral template as transformers writes it for a converted Pixtral processor
# (models/mistral3/convert_mistral3_weights_to_hf.py): mistral-community/pixtral-12b's
# [INST] ... [/INST] answer</s>, a text part's "content" or "text". (Its first revision read
# only "content" and appended eos_token to a whole list of parts: no answer given as parts
# could be rendered.) The system message goes into the last user turn only.
CHAT_TEMPLATE = '{%- if messages[0]["role"] == "system" %}{%- set system_message = messages[0]["content"] %}{%- set loop_messages = messages[1:] %}\n{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- bos_token }}{%- for message in loop_messages %}{%- if (message[\'role\'] == \'user\') != (loop.index0 % 2 == 0) %}{{- raise_exception(\'After the optional system message, conversation roles must alternate user/assistant/user/assistant/...\') }}{%- endif %}{%- if message["role"] == "user" %}{%- if loop.last and system_message is defined %}{{- "[INST]" + system_message + "\n\n" }}{%- else %}{{ "[INST]" }}{%- endif %}{%- endif %}{%- if message["content"] is not string %}{%- for chunk in message["content"] %}{%- if chunk["type"] == "text" %}{%- if "content" in chunk %}{{- chunk["content"] }}{%- elif "text" in chunk %}{{- chunk["text"] }}{%- endif %}{%- elif chunk["type"] == "image" %}{{- "[IMG]" }}{%- else %}{{- raise_exception("Unrecognized content type!") }}{%- endif %}{%- endfor %}{%- else %}{{- message["content"] }}{%- endif %}{%- if message["role"] == "user" %}{{- "[/INST]" }}{%- elif message["role"] == "assistant" %}{{- eos_token}}{%- else %}{{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}{%- endif %}{%- endfor %}'

# Tekken's control tokens in id order (<unk> 0, <s> 1, </s> 2, [INST] 3, [/INST] 4, ...,
# [IMG] 10, <pad> 11, [IMG_BREAK] 12, [IMG_END] 13, ..., [SYSTEM_PROMPT] 17, ...).
SPECIAL = (
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
)
PATCH = 16


def build(tokenizer: Any) -> Any:
    """The processor: 16-pixel patches, images scaled to at most 64 pixels (16 patches)."""
    import transformers

    image = transformers.PixtralImageProcessor(
        size={"longest_edge": 4 * PATCH}, patch_size={"height": PATCH, "width": PATCH}
    )
    return transformers.PixtralProcessor(
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=PATCH,
        spatial_merge_size=1,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``LlavaForConditionalGeneration`` with a Pixtral vision tower (the checkpoint's
    architecture) and a Mistral text model."""
    import transformers

    config = transformers.LlavaConfig(
        text_config=text_config(tokenizer, model_type="mistral"),
        vision_config=vision_config(
            model_type="pixtral", head_dim=16, image_size=4 * PATCH, patch_size=PATCH
        ),
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_seq_length=1,
    )
    return transformers.LlavaForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "pixtral",
        SPECIAL,
        build,
        "mistral-community/pixtral-12b",
        pad="<pad>",
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        end_of_turn="</s>",
        model=model,
    ),
)
