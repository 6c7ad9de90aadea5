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

import pytest
import torch
from energon_plugin_hf_processor.families import family_for
from energon_plugin_hf_processor.tiny import TINY_FAMILIES, TINY_SPECS

IGNORE = -100
#: Families whose processor takes images (audio-only ones: tests/test_audio.py; Mllama, whose
#: template refuses a system turn beside images and whose inputs are per row: test_mllama.py).
IMAGE_FAMILIES = [f for f in TINY_FAMILIES if "image" in TINY_SPECS[f].media and f != "mllama"]


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_batches_equal_the_processors_output(
    family, packed, processor_dirs, conversation_data, make_datamodule, every_batch, golden
):
    from transformers import AutoProcessor

    path, originals = conversation_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    # transformers 5.24 drops the chat template of a processor whose __init__ does not name it
    # (Phi4MultimodalProcessor): restored from the tokenizer, as its conversion script does.
    processor.chat_template = processor.chat_template or processor.tokenizer.chat_template
    spec = family_for(processor)
    assert spec.name == family
    taken = golden.taken(spec, originals)  # all but for one image per user turn (PP-Chart2Table)
    markers = "{% generation %}" in processor.chat_template
    dm = make_datamodule(path, processor_dirs[family], processor.tokenizer, packed=packed)
    checked = set()
    packed_rows = 0
    for batch in every_batch(dm, list(taken)):
        width = batch.input_ids.shape[1]
        row_keys = [key.split(",") for key in batch.__key__]
        refs = {}
        for key in (k for keys in row_keys for k in keys):
            images, conversation = originals[key]
            refs[key] = processor.apply_chat_template(
                golden.hf_messages(conversation, images, text_roles=spec.template_text_roles),
                tokenize=True,
                return_dict=True,
                return_tensors="pt",
                return_assistant_tokens_mask=markers,
            )
        check_batch_vision(batch, [refs[k] for keys in row_keys for k in keys], spec)
        rows = golden.checked_rows(
            batch,
            refs,
            processor.tokenizer,
            lambda key: golden.answers(originals[key][1]),
            golden.END_OF_TURN[family],
            spec.token_fields,
        )
        ends = {}
        for row, key, _, _, start, end in rows:
            if batch.packed_seq_params is not None:  # every sub-sample is its own segment
                cu = batch.packed_seq_params.cu_seqlens_q.tolist()
                assert row * width + start in cu and row * width + end in cu
            checked.add(key)
            ends[row] = end
        for row, end in ends.items():
            assert (batch.labels[row, end:] == IGNORE).all()
        packed_rows += sum(len(keys) > 1 for keys in row_keys)
    assert checked == taken
    assert (packed_rows > 0) == packed


def check_batch_vision(batch, refs, spec):
    """The batch's vision inputs are the references' combined by the family's rule."""
    with_images = [r for r in refs if "pixel_values" in r]
    if not with_images:
        assert batch.pixel_values is None
    else:
        expected = spec.combine("pixel_values")([r["pixel_values"] for r in with_images])
        assert torch.equal(batch.pixel_values, expected)
    if spec.grid and with_images:
        assert torch.equal(batch.image_grid_thw, torch.cat([r[spec.grid] for r in with_images]))
    for key in spec.visual:  # every sample's, also where images are not `pixel_values`
        parts = [r[key] for r in refs if key in r]
        if not parts:  # a video input, in batches without videos
            assert key not in (batch.visual or {}), key
            continue
        assert torch.equal(batch.visual[key], spec.combine(key)(parts)), key
    if int(batch.num_images.sum()):
        assert batch.num_images.sum() == batch.image_token_counts.numel()
