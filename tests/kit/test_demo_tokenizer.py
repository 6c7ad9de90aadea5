"""The offline demo tokenizers: byte-level round trip, special tokens, chat templates, saving."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from energon_plugins.synthetic import (
    FAMILIES,
    LLAVA_SYSTEM_PROMPT,
    QWEN2_SPECIAL_TOKENS,
    QWEN2_SYSTEM_PROMPT,
    build_demo_tokenizer,
    save_demo_tokenizer,
)

ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=200)
CONVERSATION = [
    {"role": "user", "content": "<image>\nWhat color is the square?"},
    {"role": "assistant", "content": "Red."},
    {"role": "user", "content": "How many?"},
    {"role": "assistant", "content": "3."},
]


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=150, deadline=None)
@given(text=ASCII)
def test_ascii_round_trip(family, text):
    tokenizer = build_demo_tokenizer(family)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


@given(words=st.lists(st.sampled_from(["<image>", "<s>", "</s>", "<pad>", "abc", " ", "\n"]), max_size=12))
@settings(max_examples=50, deadline=None)
def test_round_trip_with_special_tokens_inside(words):
    tokenizer = build_demo_tokenizer("generic")
    text = "".join(words)
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


@pytest.mark.parametrize(
    "family, tokens",
    [
        ("generic", ["<pad>", "<s>", "</s>", "<image>"]),
        ("llava", ["<pad>", "<s>", "</s>", "<image>"]),
        ("qwen2", list(QWEN2_SPECIAL_TOKENS) + ["<image>"]),
    ],
)
def test_each_special_token_is_one_id(family, tokens):
    tokenizer = build_demo_tokenizer(family)
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in tokens]
    assert all(len(i) == 1 for i in ids), dict(zip(tokens, ids))
    assert len({i[0] for i in ids}) == len(tokens)
    assert tokenizer.image_token == "<image>"
    assert tokenizer.image_token_id == tokenizer.convert_tokens_to_ids("<image>")
    # a special token inside text is still one id
    ids = tokenizer.encode(f"look{tokens[-1]}here", add_special_tokens=False)
    assert ids.count(tokenizer.convert_tokens_to_ids(tokens[-1])) == 1


def test_pad_bos_eos_attributes():
    generic = build_demo_tokenizer("generic")
    assert (generic.pad_token, generic.bos_token, generic.eos_token) == ("<pad>", "<s>", "</s>")
    assert generic.pad_token_id != generic.eos_token_id
    llava = build_demo_tokenizer("llava")
    assert (llava.pad_token, llava.bos_token, llava.eos_token) == ("<pad>", "<s>", "</s>")
    qwen = build_demo_tokenizer("qwen2")
    assert (qwen.pad_token, qwen.bos_token, qwen.eos_token) == ("<|endoftext|>", None, "<|im_end|>")
    assert qwen.pad_token_id == qwen.convert_tokens_to_ids("<|endoftext|>")


def test_custom_image_token_and_corpus():
    tokenizer = build_demo_tokenizer("llava", image_token="<img>", corpus=["zebra zebra zebra"] * 5)
    assert tokenizer.image_token == "<img>"
    assert len(tokenizer.encode("<img>", add_special_tokens=False)) == 1
    assert len(tokenizer.encode("zebra", add_special_tokens=False)) == 1  # learned from the corpus
    assert "<img>" in tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        tokenize=False,
    )


def test_cached_but_fresh_objects():
    a = build_demo_tokenizer("generic")
    b = build_demo_tokenizer("generic")
    assert a is not b
    a.add_tokens(["<extra>"])
    assert "<extra>" not in b.get_vocab()
    assert "<extra>" not in build_demo_tokenizer("generic").get_vocab()


def test_generic_chat_template():
    tokenizer = build_demo_tokenizer("generic")
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert text == (
        "<s>user: <image>\nWhat color is the square?\nassistant: Red.</s>\n"
        "user: How many?\nassistant: 3.</s>\n"
    )
    prompt = tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("\nassistant: ")
    assert not tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False).endswith("assistant: ")


def test_llava_chat_template():
    tokenizer = build_demo_tokenizer("llava")
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False)
    assert text == (
        f"<s>{LLAVA_SYSTEM_PROMPT} USER: <image>\nWhat color is the square? ASSISTANT: Red.</s>"
        "USER: How many? ASSISTANT: 3.</s>"
    )
    prompt = tokenizer.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("? ASSISTANT:")
    custom = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}] + CONVERSATION[:2], tokenize=False
    )
    assert custom.startswith("<s>Be brief. USER: ") and LLAVA_SYSTEM_PROMPT not in custom


def test_qwen2_chat_template():
    tokenizer = build_demo_tokenizer("qwen2")
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]},
        {"role": "assistant", "content": "A red circle."},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text == (
        f"<|im_start|>system\n{QWEN2_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n"
        "<|im_start|>assistant\nA red circle.<|im_end|>\n"
    )
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    own_system = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Hi."}] + messages, tokenize=False
    )
    assert (
        own_system.startswith("<|im_start|>system\nHi.<|im_end|>\n") and QWEN2_SYSTEM_PROMPT not in own_system
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenized_chat_template_matches_text(family):
    tokenizer = build_demo_tokenizer(family)
    text = tokenizer.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    ids = tokenizer.apply_chat_template(
        CONVERSATION, tokenize=True, add_generation_prompt=True, return_dict=False
    )
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    assert ids.count(tokenizer.image_token_id) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_load_offline(tmp_path, monkeypatch, family):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    directory = save_demo_tokenizer(tmp_path / family, family)
    loaded = AutoTokenizer.from_pretrained(str(directory))
    original = build_demo_tokenizer(family)
    assert loaded.get_vocab() == original.get_vocab()
    for attr in ("pad_token", "bos_token", "eos_token"):
        assert getattr(loaded, attr) == getattr(original, attr)
    assert loaded.apply_chat_template(CONVERSATION, tokenize=False) == original.apply_chat_template(
        CONVERSATION, tokenize=False
    )
    text = "How many rectangles are there? <image> 3"
    assert loaded.encode(text, add_special_tokens=False) == original.encode(text, add_special_tokens=False)
    assert loaded.decode(loaded.encode(text, add_special_tokens=False)) == text


def test_bad_arguments():
    with pytest.raises(ValueError, match="family"):
        build_demo_tokenizer("gpt9")
    with pytest.raises(ValueError, match="vocab_size"):
        build_demo_tokenizer("generic", vocab_size=10)
    with pytest.raises(ValueError, match="image_token"):
        build_demo_tokenizer("generic", image_token="")
