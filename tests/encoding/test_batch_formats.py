"""Batch formats: label alignment as each loop trains on it (a property test), and the contract.

The property test draws samples (text, loss spans that may start a sample, image-token runs),
batches them with the core's own ``batch`` (unpacked) or packs them with the packing stage
(per-sub-sequence padding, context parallelism), formats the batch, and lets each loop compute
its training examples from the format's output with the loop's own logic
(:mod:`tests._loop_replay`): Megatron-Bridge's ``vlm_step`` and masked loss, Megatron-LM's
``get_batch`` followed by megatron-core's ``LLaVAModel`` expansion, and a transformers model's
internal shift with packed sequences found from ``position_ids`` by transformers' own
``find_packed_sequence_indices``. An example is ``(context, target)``: the tokens of the
sample up to a position, and the token the loss asks for next. The multiset of examples must
equal the one the samples define, exactly: nothing lost, nothing across a sample boundary.
"""

import collections
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import energon_plugins
from energon_plugins import BuildContext, EncodedSample, MultiModalBatch
from energon_plugins.encoding.batch_formats.bridge import BridgeBatch
from energon_plugins.encoding.batch_formats.visual_inputs import VisualInputs
from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
from energon_plugins.errors import BatchFormatError, ConfigError, PluginOptionsError
from tests._loop_replay import (
    IGNORE,
    bridge_forward_args,
    bridge_get_batch,
    bridge_masked_next_token_loss,
    llava_preprocess,
    mlm_get_batch,
)

IMAGE = 3  # the image token the samples repeat once per image embedding
PAD = 0
CAPACITY = 32
FORMATS = ("megatron-bridge", "megatron-lm", "hf")


# ----------------------------------------------------------------------------- samples
@st.composite
def samples(draw, image_size):
    """One encoded sample: text tokens with loss spans (which may start at its first token),
    and 0-2 images as runs of ``image_size`` IMAGE tokens anywhere (runs may touch)."""
    n_text = draw(st.integers(2, 12))
    ids = draw(st.lists(st.integers(4, 59), min_size=n_text, max_size=n_text))
    on = draw(st.lists(st.booleans(), min_size=n_text, max_size=n_text))
    if not any(on[1:]):
        on[-1] = True
    labels = [t if o else IGNORE for t, o in zip(ids, on, strict=True)]
    images = draw(st.integers(0, 2))
    for _ in range(images):
        at = draw(st.integers(0, len(ids)))
        ids[at:at] = [IMAGE] * image_size
        labels[at:at] = [IGNORE] * image_size
    return ids, labels, [image_size] * images


def make_sample(index, ids, labels, counts):
    n = len(ids)
    label_t = torch.tensor(labels)
    return EncodedSample(
        __key__=f"s{index}",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        input_ids=torch.tensor(ids),
        labels=label_t,
        loss_mask=(label_t != IGNORE).float(),
        pixel_values=torch.rand(len(counts), 3, 2, 2) if counts else None,
        num_images=len(counts),
        seq_lengths=[n],
        image_token_counts=list(counts),
    )


def truth(drawn, *, llava):
    """The examples the samples define: ``(context, target)`` for every position with loss
    after the first; with ``llava``, none after an image token (LLaVAModel's own rule)."""
    out = collections.Counter()
    for ids, labels, _ in drawn:
        for i in range(1, len(ids)):
            if labels[i] != IGNORE and not (llava and ids[i - 1] == IMAGE):
                out[(tuple(ids[:i]), labels[i])] += 1
    return out


def examples(ids, targets, on, bounds):
    """``(context, target)`` of every supervised position, context cut at its sub-sequence."""
    out = collections.Counter()
    for start, end in bounds:
        for p in range(start, end):
            if on[p]:
                out[(tuple(int(t) for t in ids[start : p + 1]), int(targets[p]))] += 1
    return out


# ----------------------------------------------------------------------------- each loop
def bridge_examples(batch):
    step = bridge_get_batch(iter([batch]))
    tokens, labels, loss_mask = step[0], step[1], step[2]
    args = bridge_forward_args(step)
    on = loss_mask > 0
    assert bool((labels[on] != IGNORE).all()), "the loss is on where a label is -100"
    # Megatron's per-token loss is real everywhere: only the mask keeps positions out
    losses = torch.ones_like(loss_mask)
    assert int(bridge_masked_next_token_loss(loss_mask, losses)[1]) == int(on.sum())
    if "packed_seq_params" in args:
        params = args["packed_seq_params"]
        cu = params.cu_seqlens_q_padded if params.cu_seqlens_q_padded is not None else params.cu_seqlens_q
        assert int(cu[-1]) == tokens.shape[1] and tokens.shape[0] == 1
        bounds = [(int(a), int(b)) for a, b in zip(cu[:-1], cu[1:], strict=True)]
        return examples(tokens[0], labels[0], on[0], bounds)
    out = collections.Counter()
    for row in range(tokens.shape[0]):
        out += examples(tokens[row], labels[row], on[row], [(0, tokens.shape[1])])
    return out


def megatron_lm_examples(data, image_size):
    tokens, labels, loss_mask, _, imgs, num_tiles, packed = mlm_get_batch(data, pad_id=PAD)
    images = int((tokens == IMAGE).sum())
    assert imgs.shape[0] == images and num_tiles.tolist() == [1] * images
    ids, final_labels, final_mask = llava_preprocess(
        tokens, labels, loss_mask, num_tiles, image_token_index=IMAGE, img_seq_len=image_size
    )
    ids = ids.clone()
    ids[ids == -1.0] = IMAGE
    on = final_mask.bool()
    assert bool((final_labels[on] != IGNORE).all())
    out = collections.Counter()
    for row in range(ids.shape[0]):
        if packed is not None:
            cu = packed.cu_seqlens_q.tolist()
            assert cu[-1] <= ids.shape[1]
            bounds = list(zip(cu[:-1], cu[1:], strict=True))
        else:
            bounds = [(0, ids.shape[1])]
        out += examples(ids[row].long(), final_labels[row], on[row], bounds)
    return out


def hf_examples(kwargs):
    from transformers.masking_utils import find_packed_sequence_indices

    ids, labels = kwargs["input_ids"], kwargs["labels"]
    out = collections.Counter()
    position_ids = kwargs.get("position_ids")
    sequence = find_packed_sequence_indices(position_ids) if position_ids is not None else None
    for row in range(ids.shape[0]):
        seq = sequence[row] if sequence is not None else torch.zeros(ids.shape[1], dtype=torch.long)
        # the model's loss: position p predicts labels[p + 1]
        targets = torch.full_like(labels[row], IGNORE)
        targets[:-1] = labels[row, 1:]
        on = targets != IGNORE
        crossing = on[:-1] & (seq[1:] != seq[:-1])
        assert not bool(crossing.any()), "a target across a packed boundary"
        starts = [0] + ((seq[1:] != seq[:-1]).nonzero().flatten() + 1).tolist()
        bounds = list(zip(starts, starts[1:] + [ids.shape[1]], strict=True))
        out += examples(ids[row], targets, on, bounds)
    if position_ids is not None:
        assert kwargs["use_cache"] is False and "attention_mask" not in kwargs
    return out


# ----------------------------------------------------------------------------- the property
def encoder_for(pad_multiple, cp, padding):
    packing = energon_plugins.create(
        "packing_strategy", "first-fit-decreasing", {"pad_to_multiple_of": pad_multiple}
    )
    context = BuildContext(seq_length=CAPACITY, packing=packing, cp_size=cp)
    return PluginTaskEncoder(context, padding=padding), context


def formatted(name, batch, context):
    options = {"source_image_token_id": IMAGE} if name == "megatron-lm" else None
    return energon_plugins.create("batch_format", name, options, context)(batch)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    image_size=st.integers(1, 3),
    packed=st.booleans(),
    pad_multiple=st.sampled_from([1, 2, 4]),
    cp=st.sampled_from([1, 2]),
    rows=st.sampled_from([1, 2]),
    padding=st.sampled_from(["seq_length", "longest"]),
)
def test_every_format_trains_on_exactly_the_samples_targets(
    data, image_size, packed, pad_multiple, cp, rows, padding
):
    drawn = data.draw(st.lists(samples(image_size), min_size=1, max_size=6))
    encoder, context = encoder_for(pad_multiple, cp, padding)
    items = [make_sample(i, *d) for i, d in enumerate(drawn)]
    if packed:
        items = [encoder.pack_selected_samples(g) for g in encoder.select_samples_to_pack(items)]
    got = {name: collections.Counter() for name in FORMATS}
    for first in range(0, len(items), rows):
        group = items[first : first + rows]
        batch = encoder.batch(group)
        got["megatron-bridge"] += bridge_examples(formatted("megatron-bridge", batch, context))
        got["hf"] += hf_examples(formatted("hf", batch, context))
        if packed and len(group) > 1:
            with pytest.raises(BatchFormatError, match="micro_batch_size 1"):
                formatted("megatron-lm", batch, context)
            for one in group:  # Megatron-LM packs one row per micro batch
                single = formatted("megatron-lm", encoder.batch([one]), context)
                got["megatron-lm"] += megatron_lm_examples(single, image_size)
        else:
            got["megatron-lm"] += megatron_lm_examples(formatted("megatron-lm", batch, context), image_size)
    assert got["megatron-bridge"] == truth(drawn, llava=False)
    assert got["hf"] == truth(drawn, llava=False)
    assert got["megatron-lm"] == truth(drawn, llava=True)


# ----------------------------------------------------------------------------- the contract
@pytest.mark.parametrize("name", FORMATS)
def test_other_batch_types_pass_through_unchanged(name):
    fmt = energon_plugins.create("batch_format", name)
    for batch in ({"tokens": torch.ones(2, 3)}, ["a"], object()):
        assert fmt(batch) is batch


@pytest.mark.parametrize("name", FORMATS)
def test_outputs_pickle_and_hold_only_tensors_where_the_loop_moves_them(name):
    encoder, context = encoder_for(1, 1, "seq_length")
    items = [
        make_sample(i, [5, 6, IMAGE, IMAGE, 7, 8], [IGNORE, IGNORE, IGNORE, IGNORE, 7, 8], [2])
        for i in range(2)
    ]
    batch = encoder.batch(items)
    out = formatted(name, batch, context)
    again = pickle.loads(pickle.dumps(out))
    assert energon_plugins.testing.batch_differences(again, out) == []
    assert type(again) is type(out)
    if name == "megatron-bridge":
        assert isinstance(out, BridgeBatch) and out.labels is out["labels"]
        visual = out["visual_inputs"]
        assert all(v is None or isinstance(v, torch.Tensor) for v in visual.__dict__.values())
        assert set(visual.as_model_kwargs()) == {"pixel_values"}


def test_visual_inputs():
    grid = torch.tensor([[[1, 2, 2]], [[1, 2, 2]]])
    visual = VisualInputs(pixel_values=torch.zeros(2, 1, 3, 4, 4), image_grid_thw=grid, image_sizes=None)
    normalized = visual.normalized_for_model()
    assert normalized["pixel_values"].shape == (2, 3, 4, 4)
    assert normalized["image_grid_thw"].shape == (2, 3) and "image_sizes" not in normalized
    doubled = visual.map_tensors(lambda t: t * 2)
    assert doubled.image_sizes is None and torch.equal(doubled.image_grid_thw, grid * 2)
    with pytest.raises(TypeError, match="VisualInputs.image_sizes"):
        VisualInputs(image_sizes=[[4, 4]])


def test_a_callable_format_and_its_failure_are_named(vqa_dataset, tokenizer, clip_processor):
    def keys_only(batch):
        return {"keys": list(batch.__key__)}

    def broken(batch):
        raise KeyError("nope")

    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=400,
        micro_batch_size=2,
        num_workers=0,
        batch_format=keys_only,
    )
    assert len(next(dm.train_dataloader())["keys"]) == 2
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path), tokenizer, clip_processor, seq_length=400, num_workers=0, batch_format=broken
    )
    with pytest.raises(
        BatchFormatError, match="broken failed on a batch of task encoder MultimodalTaskEncoder.*KeyError"
    ):
        next(dm.train_dataloader())


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (42, ConfigError, "batch_format: expected a registered batch format name"),
        ({"name": "hf", "options": {"x": 1}}, PluginOptionsError, "batch_format 'hf'"),
        ({"nme": "hf"}, ConfigError, "batch_format: expected {name, options}"),
        ({"name": "megatron-lm", "options": {"image_tken_id": 1}}, PluginOptionsError, "image_tken_id"),
    ],
)
def test_bad_batch_format_arguments_are_named(vqa_dataset, tokenizer, clip_processor, value, error, words):
    with pytest.raises(error, match=words):
        energon_plugins.EnergonMultiModalDataModule(
            str(vqa_dataset.path), tokenizer, clip_processor, num_workers=0, batch_format=value
        )


def test_config_key_selects_validates_and_is_in_the_schema(vqa_dataset, tmp_path):
    from energon_plugins.config import check_config
    from energon_plugins.config.schema import config_json_schema
    from energon_plugins.synthetic import save_demo_tokenizer

    save_demo_tokenizer(tmp_path / "tok")
    base = {
        "path": str(vqa_dataset.path),
        "tokenizer": {"path": str(tmp_path / "tok")},
        "seq_length": 400,
        "num_workers": 0,
        "micro_batch_size": 2,
        "global_batch_size": 2,
    }
    dm = energon_plugins.EnergonMultiModalDataModule.from_config(
        {**base, "batch_format": {"name": "megatron-lm", "options": {"image_token_id": -200}}}
    )
    data = next(dm.train_dataloader())
    assert int((data["tokens"] == -200).sum()) == 2
    assert data["labels"].shape[1] == data["tokens"].shape[1] + 1 == 400 - 255 + 1
    default = energon_plugins.EnergonMultiModalDataModule.from_config(base)
    assert default.batch_format == {"name": "energon-plugins:megatron-bridge", "options": {}}
    assert isinstance(next(default.train_dataloader()), BridgeBatch)
    plain = energon_plugins.EnergonMultiModalDataModule.from_config({**base, "batch_format": None})
    assert isinstance(next(plain.train_dataloader()), MultiModalBatch)

    _, issues = check_config(
        {**base, "batch_format": {"name": "megatron-lm", "options": {"image_tken_id": 1}}}
    )
    assert [i.path for i in issues] == ["batch_format.options.image_tken_id"]
    assert "image_token_id" in issues[0].message
    _, issues = check_config({**base, "batch_format": {"name": "megatron-lx"}})
    assert [i.path for i in issues] == ["batch_format.name"] and "megatron-lm" in issues[0].message
    schema = config_json_schema()
    names = str(schema["properties"]["batch_format"])
    assert all(name in names for name in FORMATS)


def test_megatron_lm_without_token_counts_splits_runs_and_refuses_touching_ones():
    encoder, context = encoder_for(1, 1, "longest")

    def sample(ids, images):
        item = make_sample(0, ids, [IGNORE] * (len(ids) - 1) + [ids[-1]], [2] * images)
        item.image_token_counts = None  # an encoder that does not report them
        return item

    apart = formatted(
        "megatron-lm", encoder.batch([sample([5, IMAGE, IMAGE, 6, IMAGE, IMAGE, 7], 2)]), context
    )
    assert apart["tokens"].tolist() == [[5, IMAGE, 6, IMAGE, 7]]
    touching = encoder.batch([sample([5, IMAGE, IMAGE, IMAGE, IMAGE, 7], 2)])
    with pytest.raises(
        BatchFormatError, match=r"hold \[2\] image\(s\) but \[4\] image tokens .* in \[1\] run"
    ):
        formatted("megatron-lm", touching, context)
