"""MOSS-Transcribe-Diarize (``hf-audio/MOSS-Transcribe-Diarize-HF``): Whisper log-mel features
(80 bins) of every 30 s window of a clip, several clips per text, each written
``<|audio_start|>`` + one ``<|audio_pad|>`` per 4 encoder frames, with the second count (``2``,
``4``, ...) every 25 tokens + ``<|audio_end|>``; ``input_features``, ``input_features_mask``
(one row per window) and ``padding_mask`` (one row per clip, its raw samples) go to the model."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen3's added tokens in id order (<|endoftext|> 151643, <|im_start|> 151644, <|im_end|> 151645,
# ..., <think> 151667, </think> 151668), then <|audio_start|> 151669, <|audio_end|> 151670 and
# <|audio_pad|> 151671 (the config's audio_token_id).
SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
)

# The chat template transformers' convert_moss_transcribe_diarize_to_hf.py writes (CHAT_TEMPLATE):
# Qwen3's, each audio part a placeholder and a newline before the fixed transcription request.
CHAT_TEMPLATE = """{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- else -%}
        {%- set ns = namespace(has_audio=false, text=none) -%}
        {%- set keyword_namespace = namespace(items=[]) -%}
        {%- for item in content -%}
            {%- if item.type == 'audio' or 'audio' in item or 'audio_url' in item -%}
                {{- '<|audio_start|><|audio_pad|><|audio_end|>\\n' -}}
                {%- set ns.has_audio = true -%}
            {%- elif item.type == 'text' and ns.text is none -%}
                {%- set ns.text = item.text -%}
            {%- elif item.type == 'keywords' -%}
                {%- set keyword_namespace.items = keyword_namespace.items + item.keywords -%}
            {%- endif -%}
        {%- endfor -%}
        {%- if ns.has_audio -%}
            {%- if ns.text -%}
                {{- '补充信息：' + ns.text + '\\n\\n' -}}
            {%- endif -%}
            {%- if keyword_namespace.items -%}
                {{- '热词列表：[' + keyword_namespace.items|join(', ') + ']\\n\\n' -}}
            {%- endif -%}
            {{- '请将音频转写为文本，每一段需以起始时间戳和说话人编号（[S01]、[S02]、[S03]…）开头，正文为对应的语音内容，并在段末标注结束时间戳，以清晰标明该段语音范围。' -}}
        {%- elif ns.text -%}
            {{- ns.text -}}
        {%- endif -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\\n\\n' }}
    {%- else %}
        {{- 'You are a helpful assistant.\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + render_content(messages[0].content) + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- set content = render_content(message.content) %}
    {%- if ns.multi_step_tool and message.role == "user" and content is string and not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content) %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""


def build(tokenizer: Any) -> Any:
    """The processor: the checkpoint's feature extractor (80 mel bins, 16 kHz, 30 s windows,
    with frame masks) and chat template; its tokenizer, as the conversion sets it, pads on the
    left and returns tensors (the processor takes no other)."""
    import transformers

    tokenizer.padding_side = "left"
    tokenizer.init_kwargs.update(padding_side="left", padding=True, return_tensors="pt")
    features = transformers.MossTranscribeDiarizeFeatureExtractor(return_attention_mask=True)
    return transformers.MossTranscribeDiarizeProcessor(
        feature_extractor=features, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def model(tokenizer: Any) -> Any:
    """A random ``MossTranscribeDiarizeForConditionalGeneration`` (a one-layer Whisper encoder
    of hidden 32 on 80 mel bins, a Qwen3 text model of hidden 32)."""
    import transformers

    config = transformers.MossTranscribeDiarizeConfig(
        audio_config=dict(
            num_mel_bins=80,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            hidden_size=32,
        ),
        text_config=text_config(tokenizer, model_type="qwen3"),
        audio_token_id=tokenizer.convert_tokens_to_ids("<|audio_pad|>"),
    )
    return transformers.MossTranscribeDiarizeForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "moss-transcribe-diarize",
        SPECIAL,
        build,
        "hf-audio/MOSS-Transcribe-Diarize-HF",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        end_of_turn="<|im_end|>",
        model=model,
        media=("audio",),
    ),
)
