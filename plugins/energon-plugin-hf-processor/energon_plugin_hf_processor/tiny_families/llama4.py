"""Llama 4 (``meta-llama/Llama-4-Scout-17B-16E-Instruct``): each image as its tiles (a
``<|tile_x_separator|>`` / ``<|tile_y_separator|>`` grid of ``<|patch|>`` runs) and a global
view after ``<|image|>``, inside ``<|image_start|>`` ... ``<|image_end|>``; every tile's pixels
along dim 0, in bfloat16 as the image processor returns them."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# meta-llama/Llama-4-Scout-17B-16E-Instruct chat template (transformers' Llama4Processor
# ships the same as its default): <|header_start|>role<|header_end|>\n\n ... <|eot|>.
CHAT_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}\n"
    "    {%- set tools = custom_tools %}\n"
    "{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n"
    "    {%- set tools_in_user_message = true %}\n"
    "{%- endif %}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- if strftime_now is defined %}\n"
    '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
    "    {%- else %}\n"
    '        {%- set date_string = "26 Jul 2024" %}\n'
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- if not tools is defined %}\n"
    "    {%- set tools = none %}\n"
    "{%- endif %}\n"
    "\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}    \n"
    "    {%- if messages[0]['content'] is string %}\n"
    "        {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- else %}\n"
    "        {#- FIXME: The processor requires an array, always. #}\n"
    "        {%- set system_message = messages[0]['content'][0]['text']|trim %}\n"
    "    {%- endif %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "    {%- set user_supplied_system_message = true %}\n"
    "{%- else %}\n"
    '    {%- set system_message = "" %}\n'
    "    {%- set user_supplied_system_message = false %}\n"
    "{%- endif %}\n"
    "\n"
    "{#- System message if the user supplied one #}\n"
    "{%- if user_supplied_system_message %}\n"
    '    {{- "<|header_start|>system<|header_end|>\n'
    "\n"
    '" }}\n'
    "    {%- if tools is not none %}\n"
    '        {{- "Environment: ipython\n'
    '" }}\n'
    "    {%- endif %}\n"
    "    {%- if tools is not none and not tools_in_user_message %}\n"
    '        {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n'
    '        {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
    '        {{- "Do not use variables.\n'
    "\n"
    '" }}\n'
    "        {%- for t in tools %}\n"
    "            {{- t | tojson(indent=4) }}\n"
    '            {{- "\n'
    "\n"
    '" }}\n'
    "        {%- endfor %}\n"
    "    {%- endif %}\n"
    "    {{- system_message }}\n"
    '    {{- "<|eot|>" }}\n'
    "{%- endif %}\n"
    "\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n"
    "    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n"
    "        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    '        {{- raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n'
    "{%- endif %}\n"
    "    {{- '<|header_start|>user<|header_end|>\n"
    "\n"
    "' -}}\n"
    '    {{- "Given the following functions, please respond with a JSON for a function call " }}\n'
    '    {{- "with its proper arguments that best answers the given prompt.\n'
    "\n"
    '" }}\n'
    '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
    '    {{- "Do not use variables.\n'
    "\n"
    '" }}\n'
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    '        {{- "\n'
    "\n"
    '" }}\n'
    "    {%- endfor %}\n"
    '    {{- first_user_message + "<|eot|>"}}\n'
    "{%- endif %}\n"
    "\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "    {{- '<|header_start|>' + message['role'] + '<|header_end|>\n"
    "\n"
    "' }}\n"
    "        {%- if message['content'] is string %}\n"
    "            {{- message['content'] }}\n"
    "        {%- else %}\n"
    "            {%- for content in message['content'] %}\n"
    "                {%- if content['type'] == 'image' %}\n"
    "                    {{- '<|image|>' }}\n"
    "                {%- elif content['type'] == 'text' %}\n"
    "                    {{- content['text'] }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    '        {{- "<|eot|>" }}\n'
    "    {%- elif 'tool_calls' in message and message.tool_calls|length > 0 %}\n"
    "       {{- '<|header_start|>assistant<|header_end|>\n"
    "\n"
    "' -}}\n"
    "       {{- '<|python_start|>' }}\n"
    "        {%- if message['content'] is string %}\n"
    "            {{- message['content'] }}\n"
    "        {%- else %}\n"
    "            {%- for content in message['content'] %}\n"
    "                {%- if content['type'] == 'image' %}\n"
    "                    {{- '<|image|>' }}\n"
    "                {%- elif content['type'] == 'text' %}\n"
    "                    {{- content['text'] }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "       {{- '<|python_end|>' }}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "           {{- '{\"name\": \"' + tool_call.function.name + '\", ' }}\n"
    "           {{- '\"parameters\": ' }}\n"
    "           {{- tool_call.function.arguments | tojson }}\n"
    '           {{- "}" }}\n'
    "        {%- endfor %}\n"
    '       {{- "<|eot|>" }}\n'
    '    {%- elif message.role == "tool" or message.role == "ipython" %}\n'
    '        {{- "<|header_start|>ipython<|header_end|>\n'
    "\n"
    '" }}\n'
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n"
    "        {%- else %}\n"
    "            {{- message.content }}\n"
    "        {%- endif %}\n"
    '        {{- "<|eot|>" }}\n'
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|header_start|>assistant<|header_end|>\n"
    "\n"
    "' }}\n"
    "{%- endif %}\n"
)

# The checkpoint's special tokens in id order (<|begin_of_text|> 200000 ... <|eot|> 200008,
# <|finetune_right_pad|> 200018, <|image_start|> 200080, <|image_end|> 200081,
# <|tile_x_separator|> 200084, <|tile_y_separator|> 200085, <|image|> 200090, <|patch|> 200092).
SPECIAL = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|header_start|>",
    "<|header_end|>",
    "<|eom|>",
    "<|eot|>",
    "<|step|>",
    "<|python_start|>",
    "<|python_end|>",
    "<|finetune_right_pad|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|tile_x_separator|>",
    "<|tile_y_separator|>",
    "<|image|>",
    "<|patch|>",
)
# 56x56 tiles of 14-pixel patches, pixel-shuffled 2x2: 4 <|patch|> tokens per tile, at most
# 4 tiles per image besides its global view.
TILE = 56


def build(tokenizer: Any) -> Any:
    """The processor: ``Llama4ImageProcessor`` with 56-pixel tiles, up to 4 per image."""
    import transformers

    image = transformers.Llama4ImageProcessor(size={"height": TILE, "width": TILE}, max_patches=4)
    return transformers.Llama4Processor(
        image_processor=image,
        tokenizer=tokenizer,
        patch_size=14,
        pixel_shuffle_ratio=0.5,
        chat_template=CHAT_TEMPLATE,
    )


def _set_image_outputs(module: Any, args: Any, output: Any) -> Any:
    """Give the language model's output the ``image_outputs`` that transformers 5.24's
    ``Llama4ForConditionalGeneration.forward`` reads from it (and it never has)."""
    output.image_outputs = None
    return output


def model(tokenizer: Any) -> Any:
    """A random ``Llama4ForConditionalGeneration`` (one MoE layer of 2 experts), its weights in
    bfloat16 as the image processor's pixels (the checkpoint's dtype)."""
    import torch
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.Llama4Config(
        text_config=text_config(
            tokenizer, intermediate_size_mlp=64, num_local_experts=2, attention_chunk_size=4096
        ),
        vision_config=vision_config(
            intermediate_size=128,  # the pixel-shuffled width: 4 x hidden_size
            image_size=TILE,
            pixel_shuffle_ratio=0.5,
            vision_output_dim=32,
            projector_input_dim=32,
            projector_output_dim=32,
        ),
        boi_token_index=ids("<|image_start|>"),
        eoi_token_index=ids("<|image_end|>"),
        image_token_index=ids("<|patch|>"),
    )
    built = transformers.Llama4ForConditionalGeneration(config)
    for param in built.parameters():  # not .to(): the vision rotary table is complex
        param.data = param.data.to(torch.bfloat16)
    built.language_model.register_forward_hook(_set_image_outputs)
    return built


SPECS = (
    TinySpec(
        "llama4",
        SPECIAL,
        build,
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        pad="<|finetune_right_pad|>",
        bos="<|begin_of_text|>",
        eos="<|eot|>",
        end_of_turn="<|eot|>",
        model=model,
    ),
)
