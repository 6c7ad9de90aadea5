"""Llama 3.2 Vision (``meta-llama/Llama-3.2-11B-Vision-Instruct``, ``MllamaProcessor``): a
cross-attention model. Each image is one ``<|image|>`` token in the text; its tiles (up to
``max_image_tiles``, each padded to the same count) reach the vision tower, and the text
tokens after it see them through ``cross_attention_mask``. The processor's outputs are per
row (``(1, images, tiles, C, H, W)`` pixels, ``(1, images)`` aspect-ratio ids, ``(1, images,
tiles)`` tile mask): the ``mllama`` batch layout (:mod:`..batch_layouts`) regroups them by
row and builds the mask from the collated ids.

The real template refuses a system turn in a conversation with images, and writes a system
turn with today's date ("Cutting Knowledge Date: December 2023") into one without images.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# meta-llama/Llama-3.2-11B-Vision-Instruct chat template (its chat_template.json), verbatim.
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
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    '    {%- set system_message = "" %}\n'
    "{%- endif %}\n"
    "\n"
    "{#- Find out if there are any images #}\n"
    "{% set image_ns = namespace(has_images=false) %}      \n"
    "{%- for message in messages %}\n"
    "    {%- for content in message['content'] %}\n"
    "        {%- if content['type'] == 'image' %}\n"
    "            {%- set image_ns.has_images = true %}\n"
    "        {%- endif %}\n"
    "    {%- endfor %}\n"
    "{%- endfor %}\n"
    "\n"
    "{#- Error out if there are images and system message #}\n"
    '{%- if image_ns.has_images and not system_message == "" %}\n'
    '    {{- raise_exception("Prompting with images is incompatible with system messages.") }}\n'
    "{%- endif %}\n"
    "\n"
    "{#- System message if there are no images #}\n"
    "{%- if not image_ns.has_images %}\n"
    '    {{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
    "    {%- if tools is not none %}\n"
    '        {{- "Environment: ipython\\n" }}\n'
    "    {%- endif %}\n"
    '    {{- "Cutting Knowledge Date: December 2023\\n" }}\n'
    '    {{- "Today Date: " + date_string + "\\n\\n" }}\n'
    "    {%- if tools is not none and not tools_in_user_message %}\n"
    '        {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n'
    '        {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
    '        {{- "Do not use variables.\\n\\n" }}\n'
    "        {%- for t in tools %}\n"
    "            {{- t | tojson(indent=4) }}\n"
    '            {{- "\\n\\n" }}\n'
    "        {%- endfor %}\n"
    "    {%- endif %}\n"
    "    {{- system_message }}\n"
    '    {{- "<|eot_id|>" }}\n'
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
    "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    '    {{- "Given the following functions, please respond with a JSON for a function call " }}\n'
    '    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n'
    '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
    '    {{- "Do not use variables.\\n\\n" }}\n'
    "    {%- for t in tools %}\n"
    "        {{- t | tojson(indent=4) }}\n"
    '        {{- "\\n\\n" }}\n'
    "    {%- endfor %}\n"
    '    {{- first_user_message + "<|eot_id|>"}}\n'
    "{%- endif %}\n"
    "\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\n"
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
    "        {{- '<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n"
    "        {%- if not message.tool_calls|length == 1 %}\n"
    '            {{- raise_exception("This model only supports single tool-calls at once!") }}\n'
    "        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n"
    "        {{- '\"parameters\": ' }}\n"
    "        {{- tool_call.arguments | tojson }}\n"
    '        {{- "}" }}\n'
    '        {{- "<|eot_id|>" }}\n'
    '    {%- elif message.role == "tool" or message.role == "ipython" %}\n'
    '        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}\n'
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n"
    "        {%- else %}\n"
    "            {{- message.content }}\n"
    "        {%- endif %}\n"
    '        {{- "<|eot_id|>" }}\n'
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

# The checkpoint's special tokens in id order (<|begin_of_text|> 128000, <|end_of_text|>
# 128001, <|finetune_right_pad_id|> 128004, <|step_id|> 128005, <|start_header_id|> 128006,
# <|end_header_id|> 128007, <|eom_id|> 128008, <|eot_id|> 128009, <|python_tag|> 128010,
# <|image|> 128256 after the reserved ones), two of the reserved tokens kept.
SPECIAL = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
)
#: 28x28 tiles of 14-pixel patches (4 patches a tile), at most 4 tiles per image, as the
#: checkpoint's 560x560 tiles of 14-pixel patches, up to 4 per image.
TILE = 28
MAX_TILES = 4


def build(tokenizer: Any) -> Any:
    """The processor: ``MllamaImageProcessor`` with 28-pixel tiles, up to 4 per image."""
    import transformers

    image = transformers.MllamaImageProcessor(size={"height": TILE, "width": TILE}, max_image_tiles=MAX_TILES)
    return transformers.MllamaProcessor(
        image_processor=image, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def model(tokenizer: Any) -> Any:
    """A random ``MllamaForConditionalGeneration``: a one-layer vision tower with one global
    layer, and a two-layer text model whose second layer is a cross-attention layer."""
    import transformers

    config = transformers.MllamaConfig(
        text_config=text_config(
            tokenizer,
            num_hidden_layers=2,
            cross_attention_layers=[1],
            head_dim=None,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=vision_config(
            attention_heads=2,
            num_attention_heads=None,
            num_global_layers=1,
            image_size=TILE,
            max_num_tiles=MAX_TILES,
            intermediate_layers_indices=[0],
            vision_output_dim=64,  # the last hidden state and one intermediate layer's, 32 each
        ),
        image_token_index=tokenizer.convert_tokens_to_ids("<|image|>"),
    )
    return transformers.MllamaForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "mllama",
        SPECIAL,
        build,
        "meta-llama/Llama-3.2-11B-Vision-Instruct",
        pad="<|finetune_right_pad_id|>",
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        end_of_turn="<|eot_id|>",
        model=model,
    ),
)
