"""Golden tests: every family's batches equal the processor's own output, sample by sample.

For each tiny processor (built from the transformers classes with the real checkpoint's chat
template and special tokens, saved and loaded back through ``AutoProcessor``), a real Energon
dataset of single-image, multi-image, text-only and multi-turn conversations is read through
the datamodule, unpacked and packed. Every sample's token ids must equal
``processor.apply_chat_template(messages, tokenize=True, return_dict=True)``; pixel values,
grids, per-image and per-token inputs must equal the processor's, combined across the batch
by the family's rule; the labelled tokens must decode to exactly the answers (plus the token
that closes the turn) and, where the template marks answers with ``{% generation %}``, lie
inside transformers' own ``assistant_masks``.
"""

import re

import pytest
import torch

from energon_plugin_hf_processor.families import family_for
from energon_plugin_hf_processor.tiny import TINY_FAMILIES

IGNORE = -100
ROLES = {"human": "user", "gpt": "assistant"}


def hf_messages(conversation, images):
    """The conversation as ``apply_chat_template`` takes it, images inline in tag order."""
    images = iter(images)
    messages = []
    for turn in conversation:
        role = ROLES.get(turn.get("from"), turn.get("from")) if "from" in turn else turn["role"]
        content = turn.get("value", turn.get("content"))
        if isinstance(content, str):
            parts = []
            for i, piece in enumerate(re.split(r"\s*<image>\s*", content)):
                if i:
                    parts.append({"type": "image", "image": next(images)})
                if piece:
                    parts.append({"type": "text", "text": piece})
        else:
            parts = [{"type": "image", "image": next(images)} if p["type"] == "image" else p
                     for p in content]
        messages.append({"role": role, "content": parts})
    return messages


def answers(conversation):
    return [t.get("value", t.get("content")) for t in conversation
            if t.get("from") == "gpt" or t.get("role") == "assistant"]


def label_runs(labels):
    runs, start = [], None
    for i, lab in enumerate(labels.tolist() + [IGNORE]):
        if lab != IGNORE and start is None:
            start = i
        elif lab == IGNORE and start is not None:
            runs.append((start, i))
            start = None
    return runs


def check_labels(tokenizer, reference, ids, labels, expected_answers, end_token):
    """The labelled runs decode to the answers (each with its end-of-turn token, if any)."""
    assert torch.equal(labels[labels != IGNORE], ids[labels != IGNORE])
    runs = label_runs(labels)
    assert len(runs) == len(expected_answers), (runs, expected_answers)
    for (a, b), answer in zip(runs, expected_answers):
        text = tokenizer.decode(ids[a:b]).strip()
        assert text == (answer + end_token if end_token else answer), text
    if "assistant_masks" in reference:  # generation markers: inside transformers' own mask
        mask = torch.as_tensor(reference["assistant_masks"][0]).bool()
        outside = (labels != IGNORE) & ~mask
        closing = tokenizer.convert_tokens_to_ids(end_token) if end_token else None
        assert all(int(t) == closing for t in ids[outside]), tokenizer.decode(ids[outside])
        # Left out of the mask's tokens: only whitespace the template writes after an
        # answer (a token like " USER" overlaps the marked span by its leading space).
        for t in ids[mask & (labels == IGNORE)]:
            assert tokenizer.decode([int(t)])[:1].isspace(), tokenizer.decode([int(t)])


END_OF_TURN = {
    "qwen2-vl": "<|im_end|>", "qwen2.5-vl": "<|im_end|>", "qwen3-vl": "<|im_end|>",
    "llava": "", "llava-next": "</s>", "llava-onevision": "<|im_end|>",
    "idefics3": "<end_of_utterance>", "smolvlm": "<end_of_utterance>",
    "gemma3": "<end_of_turn>", "internvl": "<|im_end|>",
}


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_batches_equal_the_processors_output(family, packed, processor_dirs, conversation_data,
                                              make_datamodule, every_batch):
    from transformers import AutoProcessor

    path, originals = conversation_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    spec = family_for(processor)
    assert spec.name == family
    markers = "{% generation %}" in processor.chat_template
    dm = make_datamodule(path, processor_dirs[family], processor.tokenizer, packed=packed)
    checked = set()
    packed_rows = 0
    for batch in every_batch(dm, list(originals)):
        width = batch.input_ids.shape[1]
        row_keys = [key.split(",") for key in batch.__key__]
        refs = {}
        for key in (k for keys in row_keys for k in keys):
            images, conversation = originals[key]
            refs[key] = processor.apply_chat_template(
                hf_messages(conversation, images), tokenize=True, return_dict=True,
                return_tensors="pt", return_assistant_tokens_mask=markers,
            )
        check_batch_vision(batch, [refs[k] for keys in row_keys for k in keys], spec)
        for row, keys in enumerate(row_keys):
            start = 0
            for key in keys:
                ref = refs[key]
                end = start + ref["input_ids"].shape[1]
                ids, labels = batch.input_ids[row, start:end], batch.labels[row, start:end]
                assert torch.equal(ids, ref["input_ids"][0]), (family, key)
                check_labels(processor.tokenizer, ref, ids, labels, answers(originals[key][1]),
                             END_OF_TURN[family])
                for field in spec.token_fields:
                    assert torch.equal(batch.token_fields[field][row, start:end], ref[field][0].long())
                if batch.packed_seq_params is not None:  # every sub-sample is its own segment
                    cu = batch.packed_seq_params.cu_seqlens_q.tolist()
                    assert row * width + start in cu and row * width + end in cu
                checked.add(key)
                start = end
            assert (batch.labels[row, start:] == IGNORE).all()
            packed_rows += len(keys) > 1
    assert checked == set(originals)
    assert (packed_rows > 0) == packed


def check_batch_vision(batch, refs, spec):
    """The batch's vision inputs are the references' combined by the family's rule."""
    with_images = [r for r in refs if "pixel_values" in r]
    if not with_images:
        assert batch.pixel_values is None
        return
    expected = spec.combine("pixel_values")([r["pixel_values"] for r in with_images])
    assert torch.equal(batch.pixel_values, expected)
    if spec.grid:
        assert torch.equal(batch.image_grid_thw, torch.cat([r[spec.grid] for r in with_images]))
    for key in spec.visual:
        parts = [r[key] for r in with_images if key in r]
        if not parts:  # a video input, in batches without videos
            assert key not in (batch.visual or {}), key
            continue
        assert torch.equal(batch.visual[key], spec.combine(key)(parts)), key
    assert batch.num_images.sum() == batch.image_token_counts.numel()
