"""Reading collated batches back (used by `preview` and `bench`): segments and token counts.

The packed batches carry real megatron-core ``PackedSeqParams`` built by the core's helpers.
"""

import types

import torch

from energon_plugins.encoding.packed_seq import packed_seq_params
from energon_plugins.preview.batch_view import Segment, batch_stats, render_spans, row_segments

PAD, IGNORE = 0, -100


def _batch(rows: list[list[int]], width: int, params=None, mask: bool = True):
    input_ids = torch.full((len(rows), width), PAD)
    labels = torch.full((len(rows), width), IGNORE)
    real = torch.zeros((len(rows), width), dtype=torch.bool)
    for r, ids in enumerate(rows):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        labels[r, : len(ids)] = torch.tensor(ids)
        real[r, : len(ids)] = True
    return types.SimpleNamespace(
        input_ids=input_ids,
        labels=labels,
        loss_mask=(labels != IGNORE).float(),
        attention_mask=real if mask and params is None else None,
        packed_seq_params=params,
    )


def test_unpacked_rows_split_into_tokens_and_padding():
    batch = _batch([[5, 6, 7], [5, 6, 7, 8, 9, 10]], width=8)
    assert row_segments(batch, 0, PAD, IGNORE) == [Segment(0, 3, False), Segment(3, 8, True)]
    assert row_segments(batch, 1, PAD, IGNORE) == [Segment(0, 6, False), Segment(6, 8, True)]
    stats = batch_stats(batch, PAD, IGNORE, seq_length=8)
    assert (stats.rows, stats.samples, stats.real_tokens, stats.total_tokens) == (2, 2, 9, 16)
    assert abs(stats.padding_fraction - 7 / 16) < 1e-9


def test_packed_rows_follow_cu_seqlens_and_mark_the_tail():
    # Row 0: sub-sequences of 3 and 5 tokens + 2 padding; row 1: 6 tokens + 4 padding.
    params = packed_seq_params([3, 5, 2, 6, 4])
    batch = _batch([[1, 2, 3, 4, 5, 6, 7, 8], [9, 9, 9, 9, 9, 9]], width=10, params=params)
    assert [(s.start, s.end, s.padding) for s in row_segments(batch, 0, PAD, IGNORE)] == [
        (0, 3, False),
        (3, 8, False),
        (8, 10, True),
    ]
    assert [(s.start, s.end, s.padding) for s in row_segments(batch, 1, PAD, IGNORE)] == [
        (0, 6, False),
        (6, 10, True),
    ]
    stats = batch_stats(batch, PAD, IGNORE, seq_length=10)
    assert (stats.samples, stats.real_tokens) == (3, 14)
    assert abs(stats.fill_ratio - 0.7) < 1e-9


def test_padded_sub_sequences_use_the_padded_layout():

    # One row of width 8: sub-sequences of 3 and 2 real tokens, each padded to 4.
    params = packed_seq_params([3, 2], [4, 4])
    batch = _batch([[1, 2, 3, 0, 4, 5, 0, 0]], width=8, params=params)
    segments = row_segments(batch, 0, PAD, IGNORE)
    assert [(s.start, s.end, s.real_length) for s in segments] == [(0, 4, 3), (4, 8, 2)]
    assert batch_stats(batch, PAD, IGNORE, seq_length=8).real_tokens == 5


class _Tokenizer:
    """Decodes ids as letters; id 3 is the image token."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(ord("a") + i) for i in ids)

    def convert_ids_to_tokens(self, i):
        return "<image>"


def test_spans_collapse_image_runs_and_mark_loss():
    ids = [0, 1, 3, 3, 3, 3, 2, 4, 5]
    labels = [IGNORE] * 7 + [4, 5]
    spans = render_spans(_Tokenizer(), ids, labels, IGNORE, image_id=3)
    assert [(s.text, s.kind, s.loss) for s in spans] == [
        ("ab", "text", False),
        ("<image x4>", "image", False),
        ("c", "text", False),
        ("ef", "text", True),
    ]


def test_collapsed_image_text():
    from energon_plugins.preview.batch_view import collapsed_image_text

    assert collapsed_image_text("<image>", 576) == "<image x576>"
    assert collapsed_image_text("<|image_pad|>", 64) == "[<|image_pad|> x64]"


def test_batch_layout_opens_nested_inputs_and_describes_every_value():
    from energon_plugins.encoding.batch_formats.bridge import BridgeBatch
    from energon_plugins.encoding.batch_formats.visual_inputs import VisualInputs
    from energon_plugins.preview.batch_view import FieldLayout, batch_layout, layout_text

    batch = BridgeBatch(
        tokens=torch.zeros((2, 8), dtype=torch.long),
        attention_mask=None,
        visual_inputs=VisualInputs(pixel_values=torch.zeros((3, 3, 4, 4)), image_grid_thw=None),
        total_tokens=16,
        __keys__=["a", "b,c"],
    )
    layout = batch_layout(batch)
    assert layout == [
        FieldLayout("tokens", (2, 8), "torch.int64"),
        FieldLayout("attention_mask", None, None, "None"),
        FieldLayout("visual_inputs.pixel_values", (3, 3, 4, 4), "torch.float32"),
        FieldLayout("visual_inputs.image_grid_thw", None, None, "None"),
        FieldLayout("total_tokens", None, None, "int 16"),
        FieldLayout("__keys__", None, None, "list[str] of 2"),
    ]
    assert layout_text(layout[:1]) == "tokens (2, 8) torch.int64"


def test_batch_layout_of_a_dataclass_leaves_out_energons_bookkeeping():
    import dataclasses

    from energon_plugins.preview.batch_view import batch_layout, record_keys

    @dataclasses.dataclass
    class Batch:
        __key__: list
        input_ids: torch.Tensor
        visual: dict

    batch = Batch(["k0", "k1"], torch.zeros((2, 4), dtype=torch.int32), {})
    assert [(f.name, f.describe()) for f in batch_layout(batch)] == [
        ("input_ids", "(2, 4) torch.int32"),
        ("visual", "dict (empty)"),
    ]
    # a loop batch without __keys__ (the hf format) names rows by the encoder's __key__
    assert record_keys({"input_ids": batch.input_ids}, batch) == ["k0", "k1"]
    assert record_keys({"__keys__": ["x", "y,z"]}, batch) == ["x", "y,z"]
