"""Split packing (``truncation: split``) on real Energon datasets read through Energon's loader.

A finite pass over the train split of an interleaved dataset (two images per sample, about 35
tokens) with a pack of 16 or 20 tokens: most samples are longer than the pack. Every packed
sub-sequence is compared with the sample encoded whole: every token of every sample appears
exactly once, in order, across the packs; labels and loss mask equal the sample's, except the
first token of a continuation part (no target: it would be predicted across the cut); no cut
falls inside an image, and each image's pixels travel with the part that holds its tokens.
"""

import pytest
import torch

import energon_plugins
from energon_plugins import ConfigError
from energon_plugins.encoding.packing.split_samples import (
    SplitRefused,
    media_spans,
    parse_part_key,
    part_key,
    split_points,
)
from energon_plugins.encoding.task_encoders.multimodal import MultimodalTaskEncoder
from energon_plugins.encoding.task_encoders.options import MultimodalOptions
from tests._refusals import assert_refusal

IMAGE_TOKENS = 6
IGNORE = -100


def make_dm(info, tokenizer, processor, *, seq, multiple=1, carry=False, buffer=4, truncation="split", **kw):
    """A datamodule packing with first-fit-decreasing and ``truncation: split``; its loaders
    yield the encoder's own batches (``batch_format=None``)."""
    args = dict(
        seq_length=seq,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=10,
        packing_buffer_size=buffer,
        packing=energon_plugins.create(
            "packing_strategy", "first-fit-decreasing", {"pad_to_multiple_of": multiple, "carry_over": carry}
        ),
        batch_format=None,
        task_encoder={
            "name": "multimodal",
            "options": {"image_tokens": IMAGE_TOKENS, "truncation": truncation},
        },
    )
    args.update(kw)
    return energon_plugins.EnergonMultiModalDataModule(str(info.path), tokenizer, processor, **args)


@pytest.fixture(scope="module")
def whole(interleaved_dataset, tokenizer, small_clip_processor):
    """Every train sample encoded whole (no cut): key -> EncodedSample with its pixels."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from energon_plugins.encoding.image_processors.hf import wrap_image_processor

    encoder = MultimodalTaskEncoder(
        energon_plugins.BuildContext(
            tokenizer=tokenizer, image_processor=wrap_image_processor(small_clip_processor), seq_length=4096
        ),
        MultimodalOptions(image_tokens=IMAGE_TOKENS),
    )
    dataset = get_val_dataset(
        str(interleaved_dataset.path),
        split_part="train",
        batch_size=None,
        task_encoder=encoder,
        worker_config=WorkerConfig.default_worker_config(0),
    )
    out = {sample.__key__: sample for sample in get_loader(dataset)}
    assert sorted(out) == sorted(interleaved_dataset.split_keys["train"])
    return out


def one_pass(dm):
    """The batches of one finite pass over the train split."""
    from energon_plugins.loading.errors_policy import SkipCounts

    return list(SkipCounts().filter(dm.train_dataloader().dataloader))


def base_and_range(key, whole):
    """``(base key, start, stop)`` of a packed sub-sequence's key (a whole sample or a part)."""
    if key in whole:
        return key, 0, whole[key].length
    base, _, rest = key.rpartition("[")
    start, stop = rest.rstrip("]").split(":")
    return base, int(start), int(stop)


def check_split_pass(batches, whole, encoder, seq, multiple):
    """Every token of every sample once, in order; labels, masks, positions, images per part."""
    seen = {key: [] for key in whole}  # base key -> [(start, stop)] in emission order
    for batch in batches:
        width = batch.input_ids.shape[1]
        real = [0]  # the expected cu_seqlens_q: one segment per part, one per padding tail
        pixels = []
        for row, row_key in enumerate(batch.__key__):
            offset = 0
            for key in row_key.split(","):
                base, start, stop = base_and_range(key, whole)
                want, n = whole[base], stop - start
                assert n <= seq
                end = offset + n
                real.append(real[-1] + n)
                assert torch.equal(batch.input_ids[row, offset:end], want.input_ids[start:stop]), key
                labels, mask = want.labels[start:stop].clone(), want.loss_mask[start:stop].clone()
                if start > 0:  # a continuation part: its first token has no target
                    labels[0], mask[0] = IGNORE, 0
                assert torch.equal(batch.labels[row, offset:end], labels), key
                assert torch.equal(batch.loss_mask[row, offset:end], mask), key
                laid = -(-n // multiple) * multiple
                assert torch.equal(batch.position_ids[row, offset : offset + laid], torch.arange(laid))
                spans = media_spans(want, encoder.image_token_id, None)
                assert not any(a < cut < b for a, b in spans for cut in (start, stop)), f"{key} cuts an image"
                images = [k for k, (a, b) in enumerate(spans) if start <= a and b <= stop]
                pixels.extend(want.pixel_values[k : k + 1] for k in images)
                seen[base].append((start, stop))
                offset += laid
            assert offset <= seq
            if offset < width:
                real.append(real[-1] + width - offset)
        assert batch.packed_seq_params.cu_seqlens_q.tolist() == real
        if pixels:
            assert torch.equal(batch.pixel_values, torch.cat(pixels))
        else:
            assert batch.pixel_values is None
        assert int(batch.num_images.sum()) == len(pixels)
    for key, parts in seen.items():
        assert parts, f"{key} never packed"
        assert [a for a, _ in parts] == [0] + [b for _, b in parts[:-1]], f"{key}: parts {parts} out of order"
        assert parts[-1][1] == whole[key].length, f"{key}: parts {parts} miss its end"
    return seen


@pytest.mark.parametrize(
    ("seq", "multiple", "carry"),
    [(16, 1, False), (20, 4, False), (24, 1, True)],
    ids=["seq16", "seq20-pad4", "seq24-carry-over"],
)
def test_every_token_of_long_samples_once_in_order(
    interleaved_dataset, tokenizer, small_clip_processor, whole, seq, multiple, carry
):
    dm = make_dm(
        interleaved_dataset,
        tokenizer,
        small_clip_processor,
        seq=seq,
        multiple=multiple,
        carry=carry,
        repeat=False,
    )
    batches = one_pass(dm)
    seen = check_split_pass(batches, whole, dm.task_encoder, seq, multiple)
    split = [key for key, parts in seen.items() if len(parts) > 1]
    assert len(split) >= len(whole) // 2, "most samples are longer than the pack"
    assert max(len(parts) for parts in seen.values()) >= 2
    stats = dm.task_encoder.packing_counts()
    assert stats["split_parts"] == sum(len(p) for p in seen.values() if len(p) > 1)
    assert stats["samples"] == sum(len(p) for p in seen.values())
    assert dm.task_encoder.error_counts() == {}


def test_a_cut_moves_back_before_an_image(interleaved_dataset, tokenizer, small_clip_processor, whole):
    """At a pack size where a full part would end inside an image, the part ends before it
    (and the image starts the next part)."""
    image_id = make_dm(
        interleaved_dataset, tokenizer, small_clip_processor, seq=16
    ).task_encoder.image_token_id

    def moved_back(seq):
        return any(
            any(a < k * seq < b for a, b in media_spans(s, image_id, None) for k in range(1, 4))
            for s in whole.values()
        )

    seq = next(seq for seq in range(16, 33) if moved_back(seq))
    dm = make_dm(interleaved_dataset, tokenizer, small_clip_processor, seq=seq, repeat=False)
    seen = check_split_pass(one_pass(dm), whole, dm.task_encoder, seq, 1)
    short_heads = [(key, a, b) for key, parts in seen.items() for a, b in parts[:-1] if b - a < seq]
    assert short_heads, f"no cut moved back before an image at seq_length {seq}"
    for key, _, b in short_heads:
        assert any(a == b for a, _ in media_spans(whole[key], image_id, None)), (
            "the next part starts at an image"
        )


def test_split_points_never_cut_an_image():
    assert split_points(40, [(14, 20), (30, 36)], 16) == [(0, 14), (14, 30), (30, 40)]
    assert split_points(10, [(2, 8)], 16) == [(0, 10)]
    assert split_points(32, [], 16) == [(0, 16), (16, 32)]
    with pytest.raises(SplitRefused) as refused:
        split_points(40, [(2, 22)], 16)
    assert refused.value.reason == "split_media_too_long"


def test_a_part_of_a_part_is_the_same_part_of_the_sample(
    interleaved_dataset, tokenizer, small_clip_processor, whole
):
    """What restore relies on: cutting a carried part again equals cutting the whole sample."""
    encoder = make_dm(interleaved_dataset, tokenizer, small_clip_processor, seq=16).task_encoder
    sample = max(whole.values(), key=lambda s: s.length)
    ranges = encoder.split_ranges(sample)
    first_rest = encoder.split_part(sample, ranges[0][1], sample.length)
    again = encoder.split_part(
        first_rest,
        ranges[1][0] - ranges[0][1],
        ranges[1][1] - ranges[0][1],
        base_offset=ranges[0][1],
        base_key=sample.__key__,
    )
    direct = encoder.split_part(sample, *ranges[1])
    assert again.__key__ == direct.__key__ == f"{sample.__key__}[{ranges[1][0]}:{ranges[1][1]}]"
    for field in ("input_ids", "labels", "loss_mask", "pixel_values", "image_grid_thw"):
        a, b = getattr(again, field), getattr(direct, field)
        assert (a is None and b is None) or torch.equal(a, b), field
    assert again.num_images == direct.num_images and again.image_token_counts == direct.image_token_counts
    key = part_key(part_key(("Base", 3), ranges[0][1], sample.length), 1, 5)
    assert parse_part_key(key) == (ranges[0][1] + 1, ranges[0][1] + 5, ("Base", 3))


def test_an_image_longer_than_the_pack_is_skipped_and_counted(
    interleaved_dataset, tokenizer, small_clip_processor, whole
):
    encoder = make_dm(interleaved_dataset, tokenizer, small_clip_processor, seq=4).task_encoder
    samples = sorted(whole.values(), key=lambda s: s.__key__)[:3]
    groups, carried = encoder.plan_with_split(samples, [0] * len(samples), False)
    assert groups == [] and carried == []
    assert encoder.error_counts() == {"split_media_too_long": 3}


@pytest.mark.bad_input
def test_split_without_packing_is_refused(interleaved_dataset, tokenizer, small_clip_processor):
    dm = make_dm(
        interleaved_dataset, tokenizer, small_clip_processor, seq=16, packing=None, packing_buffer_size=None
    )
    with pytest.raises(ConfigError) as refused:
        dm.train_dataloader()
    assert_refusal(str(refused.value), "task_encoder.options.truncation", "'split'", "packing_buffer_size")


def test_other_truncation_modes_are_unchanged(interleaved_dataset, tokenizer, small_clip_processor):
    """``truncation: right`` still cuts in ``encode_sample``: no part keys, no split counts."""
    dm = make_dm(interleaved_dataset, tokenizer, small_clip_processor, seq=16, truncation="right")
    batch = next(dm.train_dataloader())
    assert all("[" not in key for row in batch.__key__ for key in row.split(","))
    assert "split_parts" not in dm.task_encoder.packing_counts()
