"""GLM-5.3-Flash (``Glm5NextProcessor``): images and videos, Qwen-style patches and grids.

``[gMASK]<sop>`` and a ``<|system|>Reasoning Effort: Max`` line open every conversation, role
tokens open each turn, an image is ``<|begin_of_image|><|image|><|end_of_image|>`` with
``<|image|>`` x tokens, a video each kept frame pair as an image with its time stamp inside
``<|begin_of_video|>`` ... ``<|end_of_video|>`` (``mm_token_type_ids`` tells image tokens, 1,
from video frame tokens, 2). The tiny processor copies zai-org/GLM-5.3-Flash's template and
GLM's special tokens (in id order: ``<|begin_of_image|>`` is the config's 154830 and
``<|image|>`` its 154854 counted from ``<|endoftext|>`` at 154820), and builds a tiny
``Glm5NextForConditionalGeneration``.

No token closes an answer (``FamilySpec.end_of_turn = ()``); an answer starts with the
template's empty ``<think></think>``, and the generation prompt ends with an open
``<think>``, so the labels of an answer start at its ``</think>``.
"""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_families.glm4v import GLM_V_SPECIAL
from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# zai-org/GLM-5.3-Flash chat_template.jinja with vision, as canada-quant/GLM-5.3-Flash-W4A16-MTP
# ships it (sha256 34d5ee66b12fa6446cdae131c352b8f68cd85369e0e6fda115583805fada3891, checked);
# an earlier text-only revision (sha256 41cff9af...) writes a reminder text in place of media.
GLM_5_TEMPLATE = r"""[gMASK]<sop>
{%- set effective_reasoning_effort = reasoning_effort if reasoning_effort is defined and reasoning_effort in ['low', 'high'] else 'max' -%}
{%- if effective_reasoning_effort is not none -%}<|system|>Reasoning Effort: {{ effective_reasoning_effort | capitalize }}{%- endif -%}
{%- set clear_thinking = clear_thinking if clear_thinking is defined else false -%}
{%- if tools -%}
{%- macro tool_to_json(tool) -%}
    {%- set ns_tool = namespace(first=true) -%}
    {{ '{' -}}
    {%- for k, v in tool.items() -%}
        {%- if k != 'defer_loading' and k != 'strict' -%}
            {%- if not ns_tool.first -%}{{- ', ' -}}{%- endif -%}
            {%- set ns_tool.first = false -%}
            "{{ k }}": {{ v | tojson(ensure_ascii=False) }}
        {%- endif -%}
    {%- endfor -%}
    {{- '}' -}}
{%- endmacro -%}
{%- macro tool_references_to_response(refs) -%}
    {{- '<tool_response><tools>\n' -}}
    {%- for tr in refs -%}
        {%- for tool in tools -%}
            {%- if 'function' in tool -%}
                {%- set tool = tool['function'] -%}
            {%- endif -%}
            {%- if tool.name == tr.name -%}
                {{- tool_to_json(tool) + '\n' -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endfor -%}
    {{- '</tools></tool_response>' -}}
{%- endmacro -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{%- if 'function' in tool -%}
    {%- set tool = tool['function'] -%}
{%- endif -%}
{% if tool.defer_loading is not defined or not tool.defer_loading %}
{{ tool_to_json(tool) }}
{% endif %}
{% endfor %}
</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>{%- endif -%}
{%- macro emit_image() -%}<|begin_of_image|><|image|><|end_of_image|>{%- endmacro -%}
{%- macro emit_video() -%}<|begin_of_video|><|video|><|end_of_video|>{%- endmacro -%}
{%- macro emit_audio() -%}<|begin_of_audio|><|end_of_audio|>{%- endmacro -%}
{%- macro visible_text(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item is mapping and item.type == 'text' -%}
                {{- item.text -}}
            {%- elif item is string -%}
                {{- item -}}
            {%- elif item is mapping and item.type in ['image', 'image_url'] -%}
                {{- emit_image() -}}
            {%- elif item is mapping and item.type in ['video', 'video_url'] -%}
                {{- emit_video() -}}
            {%- elif item is mapping and item.type in ['audio', 'audio_url', 'input_audio'] -%}
                {{- emit_audio() -}}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content }}
    {%- endif -%}
{%- endmacro -%}
{%- macro tool_response(text) -%}
{{- '<tool_response>' + text + '</tool_response>' -}}
{%- endmacro -%}
{%- macro render_tool_response(m) -%}
{%- if m.content is string -%}
    {{- tool_response(m.content) -}}
{%- elif m.content and m.content is not mapping and m.content.0.type == "tool_reference" -%}
    {{- tool_references_to_response(m.content) -}}
{%- elif is_list_of_outputs(m) -%}
    {%- for tr in m.content -%}
        {%- if tr.output is iterable and tr.output is not string and tr.output is not mapping and tr.output and tr.output.0.type == "tool_reference" -%}
            {{- tool_references_to_response(tr.output) -}}
        {%- else -%}
            {{- tool_response(visible_text(tr.output)) -}}
        {%- endif -%}
    {%- endfor -%}
{%- else -%}
    {{- tool_response(visible_text(m.content)) -}}
{%- endif -%}
{%- endmacro -%}
{%- macro id_of(obj) -%}
    {%- if obj.tool_call_id -%}
        {{- obj.tool_call_id -}}
    {%- elif obj.id -%}
        {{- obj.id -}}
    {%- endif -%}
{%- endmacro -%}
{%- macro is_list_of_outputs(m) -%}
    {%- if m.content and m.content.0.output is defined -%}1{%- endif -%}
{%- endmacro -%}
{%- macro has_dup_tool_result_id(lo, hi, target) -%}
    {%- set ns_cnt = namespace(n=0) -%}
    {%- for k in range(lo, hi + 1) -%}
        {%- set m = messages[k] -%}
        {%- if is_list_of_outputs(m) -%}
            {%- for entry in m.content -%}
                {%- if id_of(entry) == target -%}
                    {%- set ns_cnt.n = ns_cnt.n + 1 -%}
                {%- endif -%}
            {%- endfor -%}
        {%- elif id_of(m) == target -%}
            {%- set ns_cnt.n = ns_cnt.n + 1 -%}
        {%- endif -%}
        {%- if ns_cnt.n > 1 -%}{%- break -%}{%- endif -%}
    {%- endfor -%}
    {%- if ns_cnt.n > 1 -%}1{%- endif -%}
{%- endmacro -%}
{%- macro tc_id_exists(tcs, target) -%}
    {%- set ns_f = namespace(found=false) -%}
    {%- for tc in tcs -%}
        {%- if id_of(tc) == target -%}
            {%- set ns_f.found = true -%}
            {%- break -%}
        {%- endif -%}
    {%- endfor -%}
    {%- if ns_f.found -%}1{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user_index=-1) -%}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {%- set ns.last_user_index = loop.index0 -%}
    {%- endif %}
{%- endfor %}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|user|>{{ visible_text(m.content) }}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- set content = visible_text(m.content) %}
{%- if m.reasoning_content is string %}
    {%- set reasoning_content = m.reasoning_content %}
{%- elif '</think>' in content %}
    {%- set reasoning_content = content.split('</think>')[0].split('<think>')[-1] %}
    {%- set content = content.split('</think>')[-1] %}
{%- endif %}
{%- if (not clear_thinking or loop.index0 > ns.last_user_index) and reasoning_content is defined -%}
{{ '<think>' + reasoning_content +  '</think>'}}
{%- else -%}
{{ '<think></think>' }}
{%- endif -%}
{%- if content.strip() -%}
{{ content.strip() }}
{%- endif -%}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{- '<tool_call>' + tc.name -}}
{% set _args = tc.arguments %}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>{% endfor %}</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' -%}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
    {{- '<|observation|>' -}}
    {%- set block_start = loop.index0 -%}
    {%- set ns_blk = namespace(end=block_start) -%}
    {%- for j in range(block_start, messages|length) -%}
        {%- if messages[j].role == 'tool' -%}
            {%- set ns_blk.end = j -%}
        {%- else -%}
            {%- break -%}
        {%- endif -%}
    {%- endfor -%}
    {%- set ns_a = namespace(tool_calls=none) -%}
    {%- if block_start > 0 and messages[block_start - 1].role == 'assistant' and messages[block_start - 1].tool_calls -%}
        {%- set ns_a.tool_calls = messages[block_start - 1].tool_calls -%}
    {%- endif -%}
    {%- set ns_chk = namespace(can_sort=true) -%}
    {%- if not ns_a.tool_calls -%}
        {%- set ns_chk.can_sort = false -%}
    {%- else -%}
        {%- for k in range(block_start, ns_blk.end + 1) -%}
            {%- set m = messages[k] -%}
            {%- if is_list_of_outputs(m) -%}
                {%- for entry in m.content -%}
                    {%- set eid = id_of(entry) -%}
                    {%- if not eid -%}
                        {%- set ns_chk.can_sort = false -%}
                    {%- elif has_dup_tool_result_id(block_start, ns_blk.end, eid) -%}
                        {%- set ns_chk.can_sort = false -%}
                    {%- elif not tc_id_exists(ns_a.tool_calls, eid) -%}
                        {%- set ns_chk.can_sort = false -%}
                    {%- endif -%}
                {%- endfor -%}
            {%- else -%}
                {%- set tk_id = id_of(m) -%}
                {%- if not tk_id -%}
                    {%- set ns_chk.can_sort = false -%}
                {%- elif has_dup_tool_result_id(block_start, ns_blk.end, tk_id) -%}
                    {%- set ns_chk.can_sort = false -%}
                {%- elif not tc_id_exists(ns_a.tool_calls, tk_id) -%}
                    {%- set ns_chk.can_sort = false -%}
                {%- endif -%}
            {%- endif -%}
        {%- endfor -%}
        {%- for i in range(ns_a.tool_calls | length) -%}
            {%- set tc_id = id_of(ns_a.tool_calls[i]) -%}
            {%- if not tc_id -%}
                {%- set ns_chk.can_sort = false -%}
            {%- endif -%}
            {%- for j in range(i + 1, ns_a.tool_calls | length) -%}
                {%- if id_of(ns_a.tool_calls[j]) == tc_id -%}
                    {%- set ns_chk.can_sort = false -%}
                {%- endif -%}
            {%- endfor -%}
    {%- endfor -%}
    {%- endif -%}
    {%- if ns_chk.can_sort -%}
        {%- for tc in ns_a.tool_calls -%}
            {%- set tc_id = id_of(tc) -%}
            {%- for k in range(block_start, ns_blk.end + 1) -%}
                {%- set m = messages[k] -%}
                {%- if is_list_of_outputs(m) -%}
                    {%- for entry in m.content -%}
                        {%- set eid = id_of(entry) -%}
                        {%- if eid == tc_id -%}
                            {%- if entry.output is iterable and entry.output is not string and entry.output is not mapping and entry.output and entry.output.0.type == "tool_reference" -%}
                                {{- tool_references_to_response(entry.output) -}}
                            {%- else -%}
                                {{- tool_response(visible_text(entry.output)) -}}
                            {%- endif -%}
                        {%- endif -%}
    {%- endfor -%}
{%- else -%}
                    {%- set tk_id = id_of(m) -%}
                    {%- if tk_id == tc_id -%}
                        {{- render_tool_response(m) -}}
                    {%- endif -%}
                {%- endif -%}
            {%- endfor -%}
        {%- endfor -%}
    {%- else -%}
        {%- for k in range(block_start, ns_blk.end + 1) -%}
            {{- render_tool_response(messages[k]) -}}
        {%- endfor -%}
    {%- endif -%}
{% endif -%}
{%- elif m.role == 'system' -%}
<|system|>{{ visible_text(m.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    <|assistant|>{{- '<think>' -}}
{%- endif -%}
"""

PATCH = 14


def _build(tokenizer: Any) -> Any:
    import transformers

    # At most 16 merged tokens per image, 32 per video (all its frames).
    image_budget: dict[str, Any] = {"min_image_tokens": 4, "max_image_tokens": 16}
    video_budget: dict[str, Any] = {"min_image_tokens": 4, "max_image_tokens": 32}
    image = transformers.Glm5NextImageProcessor(**image_budget)
    video = transformers.Glm5NextVideoProcessor(**video_budget)
    return transformers.Glm5NextProcessor(
        image_processor=image, tokenizer=tokenizer, video_processor=video, chat_template=GLM_5_TEMPLATE
    )


def _model(tokenizer: Any) -> Any:
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.Glm5NextConfig(
        # One MLA (DSA-indexed) layer with a dense MLP; every width tiny.
        text_config=text_config(
            tokenizer,
            head_dim=None,
            num_key_value_heads=2,  # MLA: as many as the query heads
            layer_types=["indexed_attention"],
            mlp_layer_types=["dense"],
            indexer_types=["full"],
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            v_head_dim=16,
            index_head_dim=16,
            index_n_heads=2,
            linear_head_dim=16,
            linear_num_heads=2,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
        ),
        vision_config=dict(
            depth=1,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            out_hidden_size=32,
            projection_intermediate_size=64,
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
    return transformers.Glm5NextForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "glm-5-next",
        GLM_V_SPECIAL,
        _build,
        "zai-org/GLM-5.3-Flash",
        pad="<|endoftext|>",
        eos="<|endoftext|>",
        extra={"image_token": "<|image|>", "video_token": "<|video|>"},
        end_of_turn="",
        model=_model,
        media=("image", "video"),
    ),
)
