"""GLM-V (``Glm4vProcessor`` / ``Glm46VProcessor``; here zai-org/GLM-OCR's): images and videos.

``[gMASK]<sop>`` opens every conversation, role tokens open each turn, an image is
``<|begin_of_image|>`` + ``<|image|>`` x tokens + ``<|end_of_image|>``, a video is each kept
frame pair as an image with its time stamp inside ``<|begin_of_video|>`` ...
``<|end_of_video|>``. The tiny processor copies zai-org/GLM-OCR (``Glm46VProcessor``, its
tokens and template, and a tiny ``GlmOcrForConditionalGeneration``). GLM-4.1V-9B-Thinking's own
template writes ``{{ msg.content }}`` for system and assistant turns, so content given as
typed parts (what ``apply_chat_template`` takes with media) renders as a Python list there;
``Glm4vProcessor`` differs from ``Glm46VProcessor`` only in how a frame's time stamp is written.

No token closes an answer: the next turn's role token opens that turn and the last answer
ends the text (``FamilySpec.end_of_turn = ()``); an answer starts with the template's empty
``<think></think>`` block.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# zai-org/GLM-OCR chat_template (tokenizer_config.json).
GLM_V_TEMPLATE = r"""[gMASK]<sop>
{%- if tools -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{{ tool | tojson(ensure_ascii=False) }}
{% endfor %}
</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
<arg_key>{arg-key-2}</arg_key>
<arg_value>{arg-value-2}</arg_value>
...
</tool_call>{%- endif -%}
{%- macro visible_text(content) -%}
    {%- if content is string -%}
        {{- content }}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item is mapping and item.type == 'text' -%}
                {{- item.text }}
            {%- elif item is mapping and (item.type == 'image' or 'image' in item) -%}
                <|begin_of_image|><|image|><|end_of_image|>
            {%- elif item is mapping and (item.type == 'video' or 'video' in item) -%}
                <|begin_of_video|><|video|><|end_of_video|>
            {%- elif item is string -%}
                {{- item }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content }}
    {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {% set ns.last_user_index = loop.index0 -%}
    {%- endif %}
{%- endfor %}
{% for m in messages %}
{%- if m.role == 'user' -%}<|user|>
{% if m.content is string %}
{{ m.content }}
{%- else %}
{%- for item in m.content %}
{% if item.type == 'video' or 'video' in item %}
<|begin_of_video|><|video|><|end_of_video|>{% elif item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>{% elif item.type == 'text' %}
{{ item.text }}
{%- endif %}
{%- endfor %}
{%- endif %}
{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not visible_text(m.content).endswith("/nothink")) else '' -}}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- set reasoning_content = '' %}
{%- set content = visible_text(m.content) %}
{%- if m.reasoning_content is string %}
    {%- set reasoning_content = m.reasoning_content %}
{%- else %}
    {%- if '</think>' in content %}
        {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\n') %}
    {%- endif %}
{%- endif %}
{%- if loop.index0 > ns.last_user_index and reasoning_content -%}
{{ '\n<think>' + reasoning_content.strip() +  '</think>'}}
{%- else -%}
{{ '\n<think></think>' }}
{%- endif -%}
{%- if content.strip() -%}
{{ '\n' + content.strip() }}
{%- endif -%}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{ '\n<tool_call>' + tc.name }}
{% set _args = tc.arguments %}
{% for k, v in _args.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>
{% endfor %}
</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' -%}
{%- if m.content is string -%}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
    {{- '<|observation|>' }}
{%- endif %}
{{- '\n<tool_response>\n' }}
{{- m.content }}
{{- '\n</tool_response>' }}
{% elif m.content is iterable and m.content is not mapping %}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
{{- '<|observation|>' }}
{%- endif %}
{{- '\n<tool_response>\n' }}
{%- for tr in m.content -%}
  {%- if tr is mapping and tr.type is defined -%}
    {%- set t = tr.type | lower -%}
    {%- if t == 'text' and tr.text is defined -%}
{{ tr.text }}
    {%- elif t in ['image', 'image_url'] -%}
<|begin_of_image|><|image|><|end_of_image|>
    {%- elif t in ['video', 'video_url'] -%}
<|begin_of_video|><|video|><|end_of_video|>
    {%- else -%}
{{ tr | tojson(ensure_ascii=False) }}
    {%- endif -%}
  {%- else -%}
{{ tr.output if tr.output is defined else tr }}
  {%- endif -%}
{%- endfor -%}
{{- '\n</tool_response>' }}
{%- else -%}
<|observation|>{% for tr in m.content %}

<tool_response>
{{ tr.output if tr.output is defined else tr }}
</tool_response>{% endfor -%}
{% endif -%}
{%- elif m.role == 'system' -%}
<|system|>
{{ visible_text(m.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|>
{{'<think></think>\n' if (enable_thinking is defined and not enable_thinking) else ''}}
{%- endif -%}"""

# zai-org/GLM-OCR's extra special tokens, in id order.
GLM_V_SPECIAL = (
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
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|begin_of_transcription|>",
    "<|end_of_transcription|>",
    "<|code_prefix|>",
    "<|code_middle|>",
    "<|code_suffix|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "/nothink",
    "<|begin_of_box|>",
    "<|end_of_box|>",
    "<|image|>",
    "<|video|>",
)

PATCH = 14


def _build(tokenizer: Any) -> Any:
    import transformers

    budget = {"shortest_edge": (2 * PATCH) ** 2, "longest_edge": (2 * PATCH) ** 2 * 16}
    image = transformers.Glm46VImageProcessor(
        patch_size=PATCH, merge_size=2, temporal_patch_size=2, size=dict(budget)
    )
    # A video's budget covers all its frames (t x h x w).
    video = transformers.Glm46VVideoProcessor(
        patch_size=PATCH,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": (2 * PATCH) ** 2, "longest_edge": (2 * PATCH) ** 2 * 32},
    )
    return transformers.Glm46VProcessor(
        image_processor=image, tokenizer=tokenizer, video_processor=video, chat_template=GLM_V_TEMPLATE
    )


def _model(tokenizer: Any) -> Any:
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.GlmOcrConfig(
        text_config=text_config(
            tokenizer,
            head_dim=None,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 1e4,
                "mrope_section": [1, 1, 2],
                "partial_rotary_factor": 0.5,
            },
        ),
        vision_config=dict(
            depth=1,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=32,
            patch_size=PATCH,
            image_size=2 * PATCH,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=ids("<|image|>"),
        video_token_id=ids("<|video|>"),
        image_start_token_id=ids("<|begin_of_image|>"),
        image_end_token_id=ids("<|end_of_image|>"),
        video_start_token_id=ids("<|begin_of_video|>"),
        video_end_token_id=ids("<|end_of_video|>"),
    )
    return transformers.GlmOcrForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "glm-4v",
        GLM_V_SPECIAL,
        _build,
        "zai-org/GLM-OCR",
        pad="<|endoftext|>",
        eos="<|endoftext|>",
        extra={"image_token": "<|image|>", "video_token": "<|video|>"},
        end_of_turn="",
        model=_model,
        media=("image", "video"),
    ),
)
