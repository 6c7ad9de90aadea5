"""The collated batches are what the models take: a tiny random model of each family runs.

For every family with a tiny model (the built-in families' below, the others'
``TinySpec.model``; every combine rule: concatenated patches with grids, padded tiles with
image sizes and per-sample image counts, one row of sub-images with their pixel mask,
per-token type ids), a randomly initialised transformers model with a tiny config consumes
every batch of the conversation dataset as keyword arguments, built from
``MultiModalBatch`` as the ``hf`` batch format does: ``input_ids``, ``attention_mask``,
``labels`` (aligned; the model shifts), ``pixel_values``, ``image_grid_thw``, every ``visual``
and ``token_fields`` entry. The models check that image features and image tokens agree;
the loss must be finite.

A batch of text-only samples (no image in any row) reaches every family's model without
vision inputs and trains (issue 31): no family needs a blank image, as transformers' models
skip the vision tower without ``pixel_values``.
"""

import pytest
import torch
from energon_plugin_hf_processor.families import families
from energon_plugin_hf_processor.tiny import TINY_SPECS
from energon_plugin_hf_processor.tiny_sizes import text_config, vision_config

WITH_MODELS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava", "llava-next", "llava-onevision", "idefics3"]
WITH_MODELS += ["smolvlm", "gemma3", "internvl"] + [
    name
    for name, spec in TINY_SPECS.items()
    if spec.model is not None and "image" in spec.media and name != "mllama"  # test_mllama.py
]
VIDEO_MODELS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision"] + [
    name for name, spec in TINY_SPECS.items() if spec.model is not None and "video" in spec.media
]

PINPOINTS = [[28, 56], [56, 28], [56, 56]]


def _qwen_vision(patch_size, **extra):
    return dict(
        depth=1,
        hidden_size=32,
        num_heads=2,
        patch_size=patch_size,
        spatial_merge_size=2,
        temporal_patch_size=2,
        **extra,
    )


def _qwen_ids(ids):
    return dict(
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )


_MROPE = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]}


def _qwen2_vl(T, tok, ids):
    vision = _qwen_vision(14, embed_dim=32, mlp_ratio=2)
    config = T.Qwen2VLConfig(
        text_config=text_config(tok, rope_parameters=_MROPE), vision_config=vision, **_qwen_ids(ids)
    )
    return T.Qwen2VLForConditionalGeneration(config)


def _qwen2_5_vl(T, tok, ids):
    vision = _qwen_vision(
        14, intermediate_size=64, out_hidden_size=32, window_size=56, fullatt_block_indexes=[0]
    )
    config = T.Qwen2_5_VLConfig(
        text_config=text_config(tok, rope_parameters=_MROPE), vision_config=vision, **_qwen_ids(ids)
    )
    return T.Qwen2_5_VLForConditionalGeneration(config)


def _qwen3_vl(T, tok, ids):
    vision = _qwen_vision(
        16, intermediate_size=64, out_hidden_size=32, num_position_embeddings=64, deepstack_visual_indexes=[0]
    )
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    config = T.Qwen3VLConfig(
        text_config=text_config(tok, rope_parameters=rope), vision_config=vision, **_qwen_ids(ids)
    )
    return T.Qwen3VLForConditionalGeneration(config)


def _llava(T, tok, ids):
    config = T.LlavaConfig(
        text_config=text_config(tok, model_type="llama"),
        vision_config=vision_config(model_type="clip_vision_model", projection_dim=32),
        image_token_index=ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return T.LlavaForConditionalGeneration(config)


def _llava_next(T, tok, ids):
    config = T.LlavaNextConfig(
        text_config=text_config(tok, model_type="llama"),
        vision_config=vision_config(model_type="clip_vision_model", projection_dim=32, num_hidden_layers=2),
        image_token_index=ids("<image>"),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return T.LlavaNextForConditionalGeneration(config)


def _llava_onevision(T, tok, ids):
    config = T.LlavaOnevisionConfig(
        text_config=text_config(tok, model_type="qwen2"),
        vision_config=vision_config(model_type="siglip_vision_model"),
        image_token_index=ids("<image>"),
        video_token_index=ids("<video>"),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
    )
    return T.LlavaOnevisionForConditionalGeneration(config)


def _idefics3(T, tok, ids):
    config = T.Idefics3Config(
        text_config=text_config(tok, model_type="llama"),
        vision_config=vision_config(),
        scale_factor=2,
        image_token_id=ids("<image>"),
    )
    return T.Idefics3ForConditionalGeneration(config)


def _smolvlm(T, tok, ids):
    config = T.SmolVLMConfig(
        text_config=text_config(tok, model_type="llama"),
        vision_config=vision_config(),
        scale_factor=2,
        image_token_id=ids("<image>"),
    )
    return T.SmolVLMForConditionalGeneration(config)


def _gemma3(T, tok, ids):
    config = T.Gemma3Config(
        text_config=text_config(tok, model_type="gemma3_text", sliding_window=64),
        vision_config=vision_config(model_type="siglip_vision_model"),
        mm_tokens_per_image=4,
        image_token_index=ids("<image_soft_token>"),
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
    )
    return T.Gemma3ForConditionalGeneration(config)


def _internvl(T, tok, ids):
    config = T.InternVLConfig(
        text_config=text_config(tok, model_type="qwen2"),
        vision_config=vision_config(image_size=[28, 28], patch_size=[14, 14]),
        image_token_id=ids("<IMG_CONTEXT>"),
        downsample_ratio=0.5,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )
    return T.InternVLForConditionalGeneration(config)


BUILT_IN_MODELS = {
    "qwen2-vl": _qwen2_vl,
    "qwen2.5-vl": _qwen2_5_vl,
    "qwen3-vl": _qwen3_vl,
    "llava": _llava,
    "llava-next": _llava_next,
    "llava-onevision": _llava_onevision,
    "idefics3": _idefics3,
    "smolvlm": _smolvlm,
    "gemma3": _gemma3,
    "internvl": _internvl,
}
"""The built-in families' tiny models (the families of :mod:`.tiny_families` bring their own)."""


def tiny_model(family, tok):
    """A random model of ``family`` whose sizes match the tiny processor's outputs."""
    import transformers as T

    if TINY_SPECS[family].model is not None:
        return TINY_SPECS[family].model(tok)
    return BUILT_IN_MODELS[family](T, tok, tok.convert_tokens_to_ids)


def hf_kwargs(batch):
    """A ``MultiModalBatch`` as a transformers model's ``forward`` keyword arguments."""
    kwargs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask.long(),
        "labels": batch.labels,
    }
    if batch.pixel_values is not None:
        kwargs["pixel_values"] = batch.pixel_values
    if batch.image_grid_thw is not None:
        kwargs["image_grid_thw"] = batch.image_grid_thw
    kwargs.update(batch.visual or {})
    kwargs.update(batch.token_fields or {})
    return kwargs


@pytest.mark.parametrize("family", WITH_MODELS)
def test_a_tiny_model_of_the_family_consumes_every_batch(
    family, processor_dirs, conversation_data, make_datamodule, every_batch, golden
):
    from transformers import AutoProcessor

    path, originals = conversation_data
    tok = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True).tokenizer
    torch.manual_seed(0)
    model = tiny_model(family, tok).eval()
    seen_images = 0
    dm = make_datamodule(path, processor_dirs[family], tok, packed=False)
    originals = {k: originals[k] for k in golden.taken(dm.task_encoder.family, originals)}
    for batch in every_batch(dm, list(originals)):
        with torch.no_grad():
            out = model(**hf_kwargs(batch))
        assert torch.isfinite(out.loss), (family, batch.__key__)
        seen_images += int(batch.num_images.sum())
    assert seen_images >= sum(len(images) for images, _ in originals.values())


@pytest.mark.parametrize("family", VIDEO_MODELS)
def test_a_tiny_model_of_the_family_consumes_video_batches(family, processor_dirs, video_data, every_batch):
    """Videos (alone, with an image, two per sample) reach the model as it takes them: the
    model checks video features against video tokens."""
    from transformers import AutoProcessor

    import energon_plugins

    path, originals = video_data
    tok = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True).tokenizer
    torch.manual_seed(0)
    model = tiny_model(family, tok).eval()
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=4096,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {
                "processor": str(processor_dirs[family]),
                "padding": "longest",
                "video": {"num_frames": 4},
            },
        },
        batch_format=None,
    )
    # A family whose model cannot take images and videos together skips such samples (GLM-4V).
    keys = [
        k
        for k, o in originals.items()
        if dm.task_encoder.family.video_with_images or not (o["images"] and o["videos"])
    ]
    seen_videos = 0
    for batch in every_batch(dm, keys):
        with torch.no_grad():
            out = model(**hf_kwargs(batch))
        assert torch.isfinite(out.loss), (family, batch.__key__)
        seen_videos += int(batch.num_videos.sum())
    assert seen_videos >= sum(len(originals[k]["videos"]) for k in keys)


# ------------------------------------------------------------------ text-only batches
TEXT_ONLY = {
    "hello": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello."}],
    "count": [
        {"from": "human", "value": "One?"},
        {"from": "gpt", "value": "One."},
        {"from": "human", "value": "Two?"},
        {"from": "gpt", "value": "Two."},
    ],
}
"""Two conversations without media: one batch of two rows with no image at all."""

TEXT_ONLY_MODELS = WITH_MODELS + [
    name for name, spec in TINY_SPECS.items() if spec.model is not None and "image" not in spec.media
]
# Less the families whose processor raises without images (an image per user turn: PP-Chart2Table).
TEXT_ONLY_MODELS = [name for name in TEXT_ONLY_MODELS if not families()[name].image_per_user_turn]


@pytest.fixture(scope="module")
def text_only_data(tmp_path_factory):
    """A crude ``chatml`` Energon dataset of :data:`TEXT_ONLY` (one shard, train split)."""
    from energon_plugins.testing import write_crude_dataset

    root = tmp_path_factory.mktemp("hf-text-only")
    samples = [(key, [], conversation) for key, conversation in TEXT_ONLY.items()]
    write_crude_dataset(root, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return root


@pytest.mark.slow  # about 3 s a family (an Energon loader and a backward pass each)
@pytest.mark.parametrize("family", TEXT_ONLY_MODELS)
def test_a_batch_without_images_reaches_the_model_without_vision_inputs(
    family, processor_dirs, text_only_data, make_datamodule, every_batch
):
    """Every family's processor encodes a text-only sample and its tiny model trains on a batch
    with no image (no ``pixel_values``, no vision inputs), as transformers' models take text:
    no family needs a blank image (so no ``FamilySpec`` field asks for one)."""
    from transformers import AutoProcessor

    tok = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True).tokenizer
    torch.manual_seed(0)
    model = tiny_model(family, tok).train()
    dm = make_datamodule(text_only_data, processor_dirs[family], tok, packed=False)
    batch = next(every_batch(dm, list(TEXT_ONLY)))
    assert sorted(batch.__key__) == sorted(TEXT_ONLY)
    assert int(batch.num_images.sum()) == 0 and batch.pixel_values is None and not batch.visual
    out = model(**hf_kwargs(batch))
    assert torch.isfinite(out.loss), family
    out.loss.backward()
    text_grads = [p.grad for p in model.get_input_embeddings().parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in text_grads), family
