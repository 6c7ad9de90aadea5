"""The LLaVA-1.5 conversation format (Vicuna v1) as a Jinja chat template (strings only).

``SYSTEM USER: <image>\\nQ ASSISTANT: A</s>USER: Q2 ASSISTANT: A2</s>``: the system prompt,
then ``USER: `` / ``ASSISTANT: `` turns separated by a space, every answer closed by the
tokenizer's eos token, the whole preceded by its bos token when it has one. The generation
prompt is ``ASSISTANT:``.
"""

LLAVA_SYSTEM_PROMPT = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)

LLAVA_15_CHAT_TEMPLATE = (
    "{%- if bos_token -%}{{ bos_token }}{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] }}{{ ' ' }}"
    "{%- elif message['role'] == 'user' -%}{{ 'USER: ' }}{{ message['content'] }}{{ ' ' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ 'ASSISTANT: ' }}{{ message['content'] }}"
    "{%- if eos_token -%}{{ eos_token }}{%- endif -%}"
    "{%- else -%}{{ raise_exception('LLaVA-1.5 roles are system, user and assistant') }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
)
