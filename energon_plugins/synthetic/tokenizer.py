"""Offline tokenizers for the demo, the tests and the plugins.

A byte-level BPE is trained in-process with the `tokenizers` library on a small built-in
corpus (plus any extra text), so nothing is downloaded and ``decode(encode(text)) == text``
for any ASCII text (byte-level: every byte has a token). Each family adds its special tokens
(one id each) and a Jinja chat template modelled on the real model family:

- ``generic``: ``<pad>``, ``<s>``, ``</s>``, the image token; ``<s>`` then
  ``{role}: {content}\\n`` per message, assistant turns closed by ``</s>``; the generation
  prompt is ``assistant: ``.
- ``llava``: LLaVA-1.5 (Vicuna v1 conversation, separators " " and ``</s>``):
  ``<s>SYSTEM USER: <image>\\nQ ASSISTANT: A</s>USER: Q2 ASSISTANT:``; a leading system
  message replaces the default system prompt; the generation prompt is ``ASSISTANT:``.
- ``qwen2``: Qwen2-VL's ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos),
  ``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``, ``<|video_pad|>`` and ChatML; no bos token, like
  Qwen2. A message content may be a list of ``{"type": "image"}`` / ``{"type": "text",
  "text": ...}`` parts; an image part renders as
  ``<|vision_start|><|image_pad|><|vision_end|>``.

In every family the ``image_token`` argument is a special token and is exposed as
``tokenizer.image_token`` / ``tokenizer.image_token_id``: it is the placeholder that the demo
datasets put in the text (``<image>``). For generic and llava an image part of a list content
renders as that token. Encoding adds no special tokens by itself (no post-processor): the chat
templates write bos/eos where the family puts them.
"""

from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Iterable
from typing import Any

FAMILIES = ("generic", "llava", "qwen2")

LLAVA_SYSTEM_PROMPT = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
QWEN2_SYSTEM_PROMPT = "You are a helpful assistant."

QWEN2_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Renders a message content that is either a string or a list of typed parts.
_CONTENT_MACRO = (
    "{%- macro render(content, image) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' or 'image' in part -%}{{ image }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)

_NL = "{{ '\\n' }}"

_GENERIC_TEMPLATE = (
    _CONTENT_MACRO + "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ message['role'] }}{{ ': ' }}{{ render(message['content'], '__IMAGE__') }}"
    "{%- if message['role'] == 'assistant' -%}{{ eos_token }}{%- endif -%}" + _NL + "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'assistant: ' }}{%- endif -%}"
)

_LLAVA_TEMPLATE = (
    _CONTENT_MACRO + "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{ render(messages[0]['content'], '__IMAGE__') }}{{ ' ' }}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}__SYSTEM__{{ ' ' }}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'user' -%}{{ 'USER: ' }}{{ render(message['content'], '__IMAGE__') }}{{ ' ' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ 'ASSISTANT: ' }}"
    "{{ render(message['content'], '__IMAGE__') }}{{ eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
)

_QWEN2_TEMPLATE = (
    _CONTENT_MACRO + "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "<|im_start|>system" + _NL + "__SYSTEM__<|im_end|>" + _NL + "{%- endif -%}"
    "<|im_start|>{{ message['role'] }}"
    + _NL
    + "{{ render(message['content'], '<|vision_start|><|image_pad|><|vision_end|>') }}"
    "<|im_end|>" + _NL + "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant" + _NL + "{%- endif -%}"
)

# A small built-in corpus: chat-style English about shapes and colours, the words the demo
# datasets use, and the role markers of the three templates.
_BASE_CORPUS = [
    "How many rectangles are there? There are 3 rectangles.",
    "What color is the square? The square is red.",
    "What color is the background? The background is blue.",
    "A red circle on a blue background. Two green triangles on a white background.",
    "Picture 1: A yellow rectangle on a black background. Picture 2: an orange circle.",
    "USER: What is shown in the image? ASSISTANT: A purple triangle.",
    "system: You are a helpful assistant.\nuser: Describe the image.\nassistant: A shape.",
    LLAVA_SYSTEM_PROMPT,
    QWEN2_SYSTEM_PROMPT,
    "The quick brown fox jumps over the lazy dog. 0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "Answer the question using a single word or phrase. Yes. No. One. Two. Three. Four.",
    "def main():\n    return 0\n\n\tindented with a tab; trailing spaces   \n",
]


def _special_tokens(family: str, image_token: str) -> dict[str, Any]:
    """The special tokens of a family: {'pad', 'bos', 'eos', 'all'}."""
    if family == "generic" or family == "llava":
        all_tokens = ["<pad>", "<s>", "</s>"]
        spec: dict[str, Any] = {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}
    elif family == "qwen2":
        all_tokens = list(QWEN2_SPECIAL_TOKENS)
        spec = {"pad": "<|endoftext|>", "bos": None, "eos": "<|im_end|>"}
    else:
        raise ValueError(f"family: unknown tokenizer family {family!r}; expected one of {FAMILIES}")
    if image_token not in all_tokens:
        all_tokens.append(image_token)
    spec["all"] = all_tokens
    return spec


def _chat_template(family: str, image_token: str) -> str:
    if family == "generic":
        template = _GENERIC_TEMPLATE
    elif family == "llava":
        template = _LLAVA_TEMPLATE.replace("__SYSTEM__", LLAVA_SYSTEM_PROMPT)
    else:
        template = _QWEN2_TEMPLATE.replace("__SYSTEM__", QWEN2_SYSTEM_PROMPT)
    return template.replace("__IMAGE__", image_token)


@functools.lru_cache(maxsize=16)
def _trained(family: str, image_token: str, vocab_size: int, corpus: tuple[str, ...]) -> str:
    """Train the byte-level BPE once per key; return the tokenizer as JSON."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = _special_tokens(family, image_token)["all"]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(_BASE_CORPUS) + list(corpus), trainer=trainer)
    return tokenizer.to_str()


def build_demo_tokenizer(
    family: str = "generic",
    *,
    image_token: str = "<image>",
    corpus: Iterable[str] | None = None,
    vocab_size: int = 2000,
):
    """Build an offline byte-level BPE tokenizer for `family` (``generic``, ``llava``, ``qwen2``).

    Returns a fresh ``transformers.PreTrainedTokenizerFast`` on every call (the trained model
    is cached per family, image token, vocabulary size and corpus, so repeated calls are cheap
    and callers may mutate what they get). `vocab_size` is an upper bound: BPE stops merging
    when the small corpus has no more pairs (about 590 tokens with the built-in corpus).
    With ``tokenize=True``, transformers 5's ``apply_chat_template`` returns a BatchEncoding
    (``["input_ids"]``) unless ``return_dict=False`` is passed. ``pad_token``, ``bos_token`` (None for qwen2),
    ``eos_token`` and ``chat_template`` are set; ``apply_chat_template`` works offline.
    """
    if family not in FAMILIES:
        raise ValueError(f"family: unknown tokenizer family {family!r}; expected one of {FAMILIES}")
    if not isinstance(image_token, str) or not image_token:
        raise ValueError(f"image_token: must be a non-empty string, got {image_token!r}")
    if not isinstance(vocab_size, int) or vocab_size < 300:
        raise ValueError(f"vocab_size: must be an integer >= 300 (256 bytes + merges), got {vocab_size!r}")
    extra = tuple(corpus) if corpus is not None else ()
    tokenizer_json = _trained(family, image_token, vocab_size, extra)
    return _wrap(family, image_token, tokenizer_json)


def _wrap(family: str, image_token: str, tokenizer_json: str):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = _special_tokens(family, image_token)
    named = {spec["pad"], spec["bos"], spec["eos"]}
    additional = [t for t in spec["all"] if t not in named]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer_json),
        pad_token=spec["pad"],
        bos_token=spec["bos"],
        eos_token=spec["eos"],
        additional_special_tokens=additional,
        extra_special_tokens={"image_token": image_token},
        chat_template=_chat_template(family, image_token),
        clean_up_tokenization_spaces=False,
        model_max_length=1_000_000,
        padding_side="right",
    )
    return tokenizer


def save_demo_tokenizer(directory, family: str = "generic", **kwargs) -> pathlib.Path:
    """Save a demo tokenizer to `directory` so ``AutoTokenizer.from_pretrained(directory)`` loads
    it offline (for ``tokenizer: {path: ...}`` configs). Extra keyword arguments go to
    :func:`build_demo_tokenizer`. Returns the directory.
    """
    directory = pathlib.Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_demo_tokenizer(family, **kwargs)
    tokenizer.save_pretrained(str(directory))
    # A minimal marker of where this came from (AutoTokenizer ignores unknown files).
    (directory / "energon_plugins_demo.json").write_text(
        json.dumps({"family": family, **{k: v for k, v in kwargs.items() if k != "corpus"}})
    )
    return directory
