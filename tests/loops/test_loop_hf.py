"""``hf`` batches into a real transformers VLM: ``model(**batch)``.

A tiny ``LlavaForConditionalGeneration`` (CLIP vision tower and Llama text model built from
small configs, random weights, CPU) takes the batches of a real Energon dataset as they come.
Its own loss must equal the next-token cross-entropy computed here over its logits from the task
encoder's aligned labels (read independently through ``batch_format=None``), one sub-sequence
at a time. Packed rows must behave as their samples run alone: same logits per sub-sequence
(``position_ids`` restart, no attention across a boundary) and no target across a boundary.
"""

import pytest
import torch
import transformers

from tests._loop_replay import loop_datamodule, reference_loss, segments_of

SEQ = 128


@pytest.fixture(scope="module")
def processor(small_clip_processor):
    """CLIP at 28 px with 14 px patches: 4 image tokens per image, as the model's tower yields."""
    return small_clip_processor


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
    )
    text = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
    )
    config = transformers.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1,
    )
    return transformers.LlavaForConditionalGeneration(config).eval()


def make_dm(info, tokenizer, processor, **kwargs):
    kwargs.setdefault("batch_format", "hf")
    return loop_datamodule(info, tokenizer, processor, seq=SEQ, **kwargs)


CASES = [("vqa", False, 2), ("vqa", True, 1), ("interleaved", True, 1)]


@pytest.mark.parametrize(
    ("dataset", "packing", "mbs"),
    CASES,
    ids=[f"{d}-{'packed' if p else 'unpacked'}-mbs{m}" for d, p, m in CASES],
)
def test_model_loss_is_the_next_token_loss_of_the_aligned_labels(
    request, tokenizer, processor, model, dataset, packing, mbs
):
    info = request.getfixturevalue(f"{dataset}_dataset")
    loader = iter(make_dm(info, tokenizer, processor, packing=packing, mbs=mbs).train_dataloader())
    reference = iter(
        make_dm(info, tokenizer, processor, packing=packing, mbs=mbs, batch_format=None).train_dataloader()
    )
    image_id = model.config.image_token_id
    for _ in range(2):
        batch = next(loader)
        ref = next(reference)
        assert ("attention_mask" in batch) is not packing
        assert ("position_ids" in batch) is packing
        with torch.no_grad():
            out = model(**batch)
        logits = out.logits
        want_sum, want_count = reference_loss(ref, lambda row, a, b: logits[row, a:b])
        assert want_count > 0
        assert torch.allclose(out.loss, want_sum / want_count, rtol=1e-5, atol=1e-6)
        if not packing:
            continue
        # every sub-sequence gives the logits it gives alone (with its own images)
        first_image = 0
        for row, start, end in segments_of(ref):
            ids = ref.input_ids[row, start:end]
            images = int((ids == image_id).sum()) // 4
            if not bool((ref.loss_mask[row, start:end] > 0).any()):
                first_image += images
                continue  # the padding tail
            with torch.no_grad():
                alone = model(
                    input_ids=ids[None],
                    pixel_values=ref.pixel_values[first_image : first_image + images] if images else None,
                ).logits
            first_image += images
            assert torch.allclose(alone[0], logits[row, start:end], atol=1e-5)
