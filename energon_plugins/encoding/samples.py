"""The encoded-sample and batch types that the core's task encoders produce.

Plugins that subclass :class:`energon_plugins.PluginTaskEncoder` return :class:`EncodedSample`
from ``encode_sample`` and get packing and batching for free; they may subclass both types to
carry more fields.
"""

from typing import Any

import torch
from megatron.energon import Batch, Sample, edataclass


@edataclass
class EncodedSample(Sample):
    """One tokenized sample (or, after packing, several concatenated ones).

    Attributes:
        input_ids: ``(L,)`` int64 token ids, image placeholders already expanded.
        labels: ``(L,)`` int64 target ids; the sample config's ``ignore_index`` where no loss.
            Labels are aligned with ``input_ids`` (the model shifts them).
        loss_mask: ``(L,)`` float32, 1.0 where the loss counts.
        pixel_values: the image processor's output for this sample's images, concatenated along
            the first dimension (``(N, C, H, W)`` or, for patch-based processors, ``(P, D)``),
            or ``None`` for a text-only sample. Packing and ``batch`` combine the samples'
            pixel values with the encoder's ``collate_visual("pixel_values", parts)`` (default:
            concatenate along dim 0), so an encoder may keep another layout (tiles padded per
            image, one row of images) and say how it combines.
        image_grid_thw: ``(N, 3)`` int64 grids for processors that report them, else ``None``
            (combined by ``collate_visual("image_grid_thw", parts)``).
        num_images: how many images the sample holds.
        seq_lengths: lengths of the sub-sequences; one entry for an unpacked sample.
        truncated: whether tokens were cut to fit the sequence length.
        visual: further inputs of the vision model, by the keyword its ``forward`` takes
            (``image_sizes``, ``pixel_attention_mask``, ``num_patches``, ``video_grid_thw``,
            ...), each holding this sample's images (or videos) along dim 0. Packing and
            ``batch`` combine them with the encoder's ``collate_visual`` (default: concatenate
            along dim 0). ``None`` when there are none.
        token_fields: further per-token inputs aligned with ``input_ids``, ``(L,)`` each
            (``token_type_ids`` of Gemma 3, ``mm_token_type_ids``, ...): concatenated when
            packing, padded with 0 when batching. ``None`` when there are none.
        image_token_counts: how many tokens each image takes in ``input_ids``, in order;
            ``None`` when unknown.
        num_videos: how many videos the sample holds (their inputs are ``visual`` entries:
            ``pixel_values_videos``, ``video_grid_thw``, ...).
        video_token_counts: how many tokens each video takes in ``input_ids``, in order;
            ``None`` when unknown.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    num_images: int = 0
    seq_lengths: list[int] | None = None
    truncated: bool = False
    visual: dict[str, torch.Tensor] | None = None
    token_fields: dict[str, torch.Tensor] | None = None
    image_token_counts: list[int] | None = None
    num_videos: int = 0
    video_token_counts: list[int] | None = None

    @property
    def length(self) -> int:
        """The number of tokens."""
        return int(self.input_ids.shape[0])


@edataclass
class PendingImagesSample(EncodedSample):
    """An encoded sample whose image pixels are not processed yet.

    The tokens, labels and ``image_token_counts`` (and ``image_grid_thw`` for grid processors)
    are final, computed from the image sizes alone, so packing can plan with exact lengths;
    ``pixel_values`` is ``None`` until the task encoder's ``complete_samples`` processes
    ``pending_images`` (after the sample's pack is chosen, or in ``batch``).

    Attributes:
        pending_images: the images as Energon decoded them for the processor (encoded bytes,
            8-bit tensors or PIL images), in order.
    """

    pending_images: list[Any] | None = None


@edataclass
class MultiModalBatch(Batch):
    """A collated batch, ready for a Megatron vision-language model.

    Attributes:
        input_ids, labels: ``(B, L)`` int64, padded to the batch's sequence length with the
            pad id and ``ignore_index``.
        loss_mask: ``(B, L)`` float32.
        position_ids: ``(B, L)`` int64; restarting at 0 in every packed sub-sequence.
        attention_mask: ``(B, L)`` bool, ``True`` on real tokens (padding mask; causal masking
            is the model's job). ``None`` for packed batches, which use ``packed_seq_params``.
        pixel_values: the batch's images concatenated along the first dimension, or ``None``.
        image_grid_thw: ``(N, 3)`` grids concatenated, or ``None``.
        num_images: ``(B,)`` int64 images per row, so rows can find their images.
        packed_seq_params: megatron-core ``PackedSeqParams(qkv_format="thd")`` for packed
            batches, else ``None``.
        visual: the samples' further vision inputs (see :class:`EncodedSample`), each
            collated by the encoder's ``collate_visual``; ``None`` when there are none.
        token_fields: ``(B, L)`` per-token inputs, padded with 0; ``None`` when there are none.
        image_token_counts: ``(N,)`` int64 tokens per image over the batch, in order, when
            every sample knows them; else ``None``.
        num_videos: ``(B,)`` int64 videos per row, so rows can find their videos.
        video_token_counts: ``(M,)`` int64 tokens per video over the batch, in order, when
            every sample knows them; else ``None``.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    num_images: torch.Tensor | None = None
    packed_seq_params: Any = None
    visual: dict[str, torch.Tensor] | None = None
    token_fields: dict[str, torch.Tensor] | None = None
    image_token_counts: torch.Tensor | None = None
    num_videos: torch.Tensor | None = None
    video_token_counts: torch.Tensor | None = None
