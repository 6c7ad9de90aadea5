"""Qwen3-Omni (``qwen3_omni_moe``; ``Qwen/Qwen3-Omni-30B-A3B-Thinking``): Qwen2-VL patches of
16 pixels for images and videos (``<|image_pad|>`` / ``<|video_pad|>`` between
``<|vision_start|>`` and ``<|vision_end|>``) and Whisper log-mel features for audio
(``<|audio_pad|>`` between ``<|audio_start|>`` and ``<|audio_end|>``). Unlike Qwen2.5-Omni's,
the processor pads a call's clips to the longest (not to 30 s) and counts an audio's tokens
per 100-frame window (13 a window, the rest by the two stride-2 stages); the thinker takes
``input_features`` and ``feature_attention_mask`` beside the vision inputs."""

from __future__ import annotations

from typing import Any

from energon_plugin_hf_processor.tiny_families.qwen2_5_omni import omni_inputs
from energon_plugin_hf_processor.tiny_sizes import text_config
from energon_plugin_hf_processor.tiny_spec import TinySpec

# Qwen/Qwen3-Omni-30B-A3B-Thinking chat_template.json (the thinker's template: Qwen3's tool and
# reasoning turns, media parts written inline without separators; no default system turn).
CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\n"
    '    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {%- if messages[0].content is string %}\n"
    "            {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "        {%- else %}\n"
    "            {%- for content in messages[0].content %}\n"
    "                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}\n"
    "                    {{- '<|im_start|>system\\n' +\"<|vision_start|><|image_pad|><|vision_end|>\"+ '<|im_end|>\\n' }}\n"
    "                {%- elif content.type == 'audio' or 'audio' in content or 'audio_url' in content %}\n"
    "                    {{- '<|im_start|>system\\n' +\"<|audio_start|><|audio_pad|><|audio_end|>\"+ '<|im_end|>\\n' }}\n"
    "                {%- elif content.type == 'video' or 'video' in content %}\n"
    "                    {{- '<|im_start|>system\\n' +\"<|vision_start|><|video_pad|><|vision_end|>\"+ '<|im_end|>\\n' }}\n"
    "                {%- elif content.type == 'text' %}\n"
    "                    {{- '<|im_start|>system\\n' +content.text+ '<|im_end|>\\n' }}\n"
    "                {%- endif %}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    '        {%- set content = namespace(text="") %}\n'
    "        {%- for mcontent in message.content %}\n"
    "            {%- if mcontent.type == 'image' or 'image' in mcontent or 'image_url' in mcontent %}\n"
    '                {%- set content.text = content.text~"<|vision_start|><|image_pad|><|vision_end|>" %}\n'
    "            {%- elif mcontent.type == 'audio' or 'audio' in mcontent or 'audio_url' in mcontent %}\n"
    '                {%- set content.text = content.text~"<|audio_start|><|audio_pad|><|audio_end|>" %}\n'
    "            {%- elif mcontent.type == 'video' or 'video' in mcontent %}\n"
    '                {%- set content.text = content.text~"<|vision_start|><|video_pad|><|vision_end|>" %}\n'
    "            {%- elif mcontent.type == 'text' %}\n"
    "                {%- set content.text = content.text~mcontent.text %}\n"
    "            {%- endif %}\n"
    "        {%- endfor %}\n"
    "        {%- set content = content.text %}\n"
    "    {%- endif %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    '        {%- set reasoning_content = "" %}\n'
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "    {%- if loop.index0 > ns.last_query_index %}\n"
    "        {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip(\"\\n\") + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "    {%- endif %}\n"
    "    {%- if message.tool_calls %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}\n"
    "            {%- if tool_call.function %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    '            {{- \'<tool_call>\\n{"name": "\' }}\n'
    "            {{- tool_call.name }}\n"
    '            {{- \'", "arguments": \' }}\n'
    "            {%- if tool_call.arguments is string %}\n"
    "                {{- tool_call.arguments }}\n"
    "            {%- else %}\n"
    "                {{- tool_call.arguments | tojson }}\n"
    "            {%- endif %}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "    {%- endif %}\n"
    "    {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}{{- '<|im_start|>user' }}{%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n"
    "{%- endif %}\n"
)

# The checkpoint's added tokens in id order (<|endoftext|> 151643, <|im_start|> 151644,
# <|im_end|> 151645, <|vision_start|> 151652 ... <|image_pad|> 151655, <|video_pad|> 151656,
# <think> 151667, </think> 151668, <|audio_start|> 151669, <|audio_end|> 151670,
# <|audio_pad|> 151675).
SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
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
PATCH = 16
#: The audio encoder's window in mel frames, halved (the processor's and the model's ``n_window``).
N_WINDOW = 50


def build(tokenizer: Any) -> Any:
    """The processor: Qwen2.5-Omni's inputs (:func:`.qwen2_5_omni.omni_inputs`) with 16-pixel
    patches and the checkpoint's template."""
    import transformers

    image, video, features = omni_inputs(PATCH)
    return transformers.Qwen3OmniMoeProcessor(
        image_processor=image,
        video_processor=video,
        feature_extractor=features,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def model(tokenizer: Any) -> Any:
    """A random ``Qwen3OmniMoeThinkerForConditionalGeneration`` (the text-out part of the
    model: one-layer vision and audio encoders, a one-layer MoE text model of two experts;
    hidden 32)."""
    import transformers

    ids = tokenizer.convert_tokens_to_ids
    config = transformers.Qwen3OmniMoeThinkerConfig(
        audio_config=dict(
            num_mel_bins=128,
            encoder_layers=1,
            encoder_attention_heads=2,
            encoder_ffn_dim=64,
            d_model=32,
            output_dim=32,
            downsample_hidden_size=8,
            n_window=N_WINDOW,
        ),
        vision_config=dict(
            depth=1,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=PATCH,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=32,
            num_position_embeddings=64,
            deepstack_visual_indexes=[0],
        ),
        text_config=text_config(
            tokenizer,
            head_dim=None,
            num_experts=2,
            num_experts_per_tok=1,
            moe_intermediate_size=32,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]},
        ),
        audio_token_id=ids("<|audio_pad|>"),
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        audio_start_token_id=ids("<|audio_start|>"),
        vision_start_token_id=ids("<|vision_start|>"),
    )
    return transformers.Qwen3OmniMoeThinkerForConditionalGeneration(config)


SPECS = (
    TinySpec(
        "qwen3-omni",
        SPECIAL,
        build,
        "Qwen/Qwen3-Omni-30B-A3B-Thinking",
        pad="<|endoftext|>",
        eos="<|im_end|>",
        extra={
            "image_token": "<|image_pad|>",
            "audio_token": "<|audio_pad|>",
            "video_token": "<|video_pad|>",
            "vision_bos_token": "<|vision_start|>",
            "vision_eos_token": "<|vision_end|>",
            "audio_bos_token": "<|audio_start|>",
            "audio_eos_token": "<|audio_end|>",
        },
        end_of_turn="<|im_end|>",
        model=model,
        media=("image", "video", "audio"),
    ),
)
