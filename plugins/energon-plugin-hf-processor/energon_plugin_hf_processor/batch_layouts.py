"""Batch layouts: a family's vision inputs laid out per row of a batch (Mllama).

Most families' vision inputs combine key by key (:data:`~.family_spec.COMBINE`): every image
along one dim, whatever row it is in. A cross-attention model takes them per row instead:
Mllama's ``pixel_values`` are ``(B, images, tiles, C, H, W)`` (images zero-padded to the most
in a row), and its ``cross_attention_mask`` ``(B, L, images, tiles)`` says which text tokens
see which image's tiles. A :class:`~.family_spec.FamilySpec` names such a layout by
``batch_layout`` (a :data:`BATCH_LAYOUTS` name); its samples keep one row of images each
(``image_row``: packing concatenates a pack's images, as a packed row holds them), and
:class:`RowLayouts` lays every collated batch out with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from megatron.energon import stateless

from energon_plugins import PluginOutputError

#: ``layout(batch, rows, image_token_id) -> batch``: the collated batch (its vision inputs as
#: the combine rules left them) laid out per row; ``rows`` are the batch's samples (a packed
#: row: one ``PackedSample``), ``image_token_id`` the token whose positions hold images.
BatchLayout = Callable[[Any, Sequence[Any], Any], Any]


def cross_attention_spans(ids: Sequence[int], image_token_id: int) -> list[tuple[int, int]]:
    """Per image token of one sample's ``ids``, the tokens that see its image, ``(start, end)``.

    transformers' ``get_cross_attention_token_mask`` rule: an image's span opens at its token
    and runs to the next image token; consecutive image tokens all run to where the last of
    them does; the last image's span runs to the end of the sample.
    """
    places = [i for i, token in enumerate(ids) if token == image_token_id]
    spans = [[a, b] for a, b in zip(places, [*places[1:], len(ids)][: len(places)], strict=True)]
    last_end = len(ids)
    for span in reversed(spans):
        if span[1] == span[0] + 1:  # followed directly by another image token
            span[1] = last_end
        last_end = span[1]
    return [(a, b) for a, b in spans]


def _segments(sample: Any) -> list[tuple[int, int]]:
    """``(start, end)`` of each sub-sample of a row (its real tokens, without packing pads)."""
    laid_out = list(sample.seq_lengths or [sample.length])
    real = list(getattr(sample, "real_seq_lengths", None) or laid_out)
    out, start = [], 0
    for width, length in zip(laid_out, real, strict=True):
        out.append((start, start + length))
        start += width
    return out


def mllama_rows(batch: Any, rows: Sequence[Any], image_token_id: Any) -> Any:
    """Mllama's inputs per row: ``pixel_values`` ``(B, n, T, C, H, W)``, ``aspect_ratio_ids``
    ``(B, n)`` and ``aspect_ratio_mask`` ``(B, n, T)`` of each row's images (``n`` the most
    in a row; a padding image has id 0, pixels 0 and its first tile set, as the processor pads
    a batch), and ``cross_attention_mask`` ``(B, L, n, T)`` built from the collated ids: each
    sub-sample's tokens see its own images only, by :func:`cross_attention_spans`, over each
    image's tiles. A batch without images is left as it is (the model takes text alone).

    Raises:
        PluginOutputError: a row holds more or fewer image tokens than images.
    """
    import torch

    if batch.pixel_values is None:
        return batch
    visual = dict(batch.visual or {})
    flat_pixels = batch.pixel_values[0]  # (images of the batch, T, C, H, W): one row of all
    flat_ids, flat_mask = visual["aspect_ratio_ids"][0], visual["aspect_ratio_mask"][0]
    counts = [int(n) for n in batch.num_images.tolist()]
    size, most, tiles = len(counts), max(counts), int(flat_mask.shape[1])
    width = int(batch.input_ids.shape[1])
    pixels = flat_pixels.new_zeros((size, most, *flat_pixels.shape[1:]))
    ratio_ids = flat_ids.new_zeros((size, most))
    ratio_mask = flat_mask.new_zeros((size, most, tiles))
    ratio_mask[:, :, 0] = 1
    cross = torch.zeros((size, width, most, tiles), dtype=torch.long)
    first = 0
    for row, (count, sample) in enumerate(zip(counts, rows, strict=True)):
        own = slice(first, first + count)
        pixels[row, :count] = flat_pixels[own]
        ratio_ids[row, :count] = flat_ids[own]
        ratio_mask[row, :count] = flat_mask[own]
        tile_counts = flat_mask[own].sum(-1).tolist()
        image = 0
        for start, end in _segments(sample):
            for a, b in cross_attention_spans(batch.input_ids[row, start:end].tolist(), image_token_id):
                if image < count:
                    cross[row, start + a : start + b, image, : int(tile_counts[image])] = 1
                image += 1
        if image != count:
            raise PluginOutputError(
                f"hf-processor: batch layout 'mllama': row {row} ({getattr(sample, '__key__', '?')!r}) "
                f"holds {image} image tokens (id {image_token_id}) but {count} images"
            )
        first += count
    visual.update(aspect_ratio_ids=ratio_ids, aspect_ratio_mask=ratio_mask, cross_attention_mask=cross)
    batch.pixel_values = pixels
    batch.visual = visual
    return batch


BATCH_LAYOUTS: dict[str, BatchLayout] = {"mllama": mllama_rows}
"""Named batch layouts (:attr:`~.family_spec.FamilySpec.batch_layout` values)."""


def register_batch_layout(name: str, layout: BatchLayout) -> None:
    """Name a batch layout (``layout(batch, rows, image_token_id) -> batch``) for family specs."""
    if name in BATCH_LAYOUTS and BATCH_LAYOUTS[name] is not layout:
        raise ValueError(f"batch layout {name!r} is already registered")
    BATCH_LAYOUTS[name] = layout


class RowLayouts:
    """Mixin of the task encoder: every collated batch laid out by its family's
    ``batch_layout`` (none: the batch as the combine rules made it)."""

    family: Any
    image_token_id: Any

    @stateless
    def batch(self, samples: list[Any]) -> Any:
        """The core's batch of ``samples``, laid out per row where the family says so."""
        collated = super().batch(samples)  # type: ignore[misc]
        name = self.family.batch_layout
        return collated if name is None else BATCH_LAYOUTS[name](collated, samples, self.image_token_id)
