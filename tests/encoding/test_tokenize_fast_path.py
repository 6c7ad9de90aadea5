"""The direct-backend tokenization equals transformers' call, and falls back where it would not."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from energon_plugins.encoding.chat.conversation import (
    _direct_backend,
    tokenize_text,
    tokenize_texts,
)
from energon_plugins.synthetic import FAMILIES, build_demo_tokenizer

TOKENIZERS = {family: build_demo_tokenizer(family) for family in FAMILIES}

_pieces = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.sampled_from(["<image>", "</s>", "<|im_end|>", "<|im_start|>", " ", "\n", "\t x"]),
    ),
    max_size=6,
).map("".join)


def _reference(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_pieces, max_size=4))
def test_equal_to_the_tokenizer_call(family, texts):
    tok = TOKENIZERS[family]
    assert _direct_backend(tok) is not None
    expected = [_reference(tok, t) for t in texts]
    assert tokenize_texts(tok, texts) == expected
    assert [tokenize_text(tok, t) for t in texts] == expected


def test_split_special_tokens_uses_the_tokenizer_call():
    tok = build_demo_tokenizer("generic")
    tok.split_special_tokens = True
    assert _direct_backend(tok) is None  # backend not yet told to split: no direct call
    text = "look <image> here"
    ids = tokenize_texts(tok, [text])[0]
    assert ids == _reference(tok, text)
    assert tok.convert_tokens_to_ids("<image>") not in ids  # the tag was split


def test_backend_padding_or_truncation_uses_the_tokenizer_call():
    tok = build_demo_tokenizer("generic")
    tok.backend_tokenizer.enable_truncation(max_length=3)
    assert _direct_backend(tok) is None
    text = "a long enough sentence to be truncated"
    assert tokenize_texts(tok, [text])[0] == _reference(tok, text)
    assert len(_reference(tok, text)) > 3  # transformers' call does not truncate


class _SlowLike:
    """A tokenizer without a Rust backend (as a slow tokenizer is)."""

    is_fast = False

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


def test_slow_tokenizer_uses_its_call():
    assert tokenize_texts(_SlowLike(), ["ab", ""]) == [[97, 98], []]


def _expand_reference(ids, labels, text_id, model_id, counts, ignore):
    """Token by token: each tag becomes its run of image tokens (ignored in the labels)."""
    out_ids, out_labels, runs, k = [], [], [], 0
    for tok, lab in zip(ids, labels, strict=True):
        if tok == text_id:
            out_ids += [model_id] * counts[k]
            out_labels += [ignore] * counts[k]
            runs.append((len(out_ids) - counts[k], len(out_ids)))
            k += 1
        else:
            out_ids.append(tok)
            out_labels.append(lab)
    return out_ids, out_labels, runs


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, 6), max_size=40),
    data=st.data(),
)
def test_expand_image_tokens_equals_token_by_token(ids, data):
    from energon_plugins.encoding.chat.conversation import expand_image_tokens

    labels = [t if t % 2 else -100 for t in ids]
    counts = data.draw(st.lists(st.integers(0, 5), min_size=ids.count(3), max_size=ids.count(3)))
    got = expand_image_tokens(ids, labels, text_id=3, model_id=99, counts=counts, ignore_index=-100)
    assert got == _expand_reference(ids, labels, 3, 99, counts, -100)
    with pytest.raises(ValueError, match="image tag"):
        expand_image_tokens(ids, labels, text_id=3, model_id=99, counts=[*counts, 1], ignore_index=-100)
