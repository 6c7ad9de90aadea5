"""Packed rows: the samples of one group laid end to end, and the batch of packed rows.

:class:`PackAssemblyMixin` is the assembling half of
:class:`~energon_plugins.encoding.task_encoders.packing.PackingMixin`:

- Energon's ``pack_selected_samples`` hook (``@stateless``) first finishes the samples'
  deferred work (``complete_samples``: the image pixels of samples whose lengths were planned
  from the image sizes, processed together into one tensor), cuts overlong samples
  (:meth:`~PackAssemblyMixin.truncate_for_packing`, never inside an image or video), then
  concatenates tokens, labels, loss masks, pixel values, image grids and image counts into one
  :class:`PackedSample` whose ``seq_lengths`` are the sub-sequence lengths (each padded to
  ``pad_to_multiple_of``) and ``real_seq_lengths`` the unpadded ones;
- :meth:`~PackAssemblyMixin.finish_packed_batch` (called at the end of ``batch``) gives every
  batch of packed rows megatron-core ``PackedSeqParams(qkv_format="thd")``, with
  ``cu_seqlens_q_padded`` / ``cu_seqlens_kv_padded`` when ``pad_to_multiple_of`` > 1.
"""

from typing import TYPE_CHECKING, Any

import torch
from megatron.energon import edataclass, stateless
from megatron.energon.errors import FatalSampleError

from energon_plugins.encoding.packed_seq import packed_seq_params
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.packing_selection import round_up


@edataclass
class PackedSample(EncodedSample):
    """Several encoded samples laid end to end in one row.

    Attributes:
        seq_lengths: the sub-sequence lengths as laid out (each padded to
            ``pad_to_multiple_of``); they sum to the row's length.
        real_seq_lengths: the unpadded sub-sequence lengths.
        sub_keys: the ``__key__`` of each sub-sequence, in order (``__key__`` joins them with
            commas).
    """

    real_seq_lengths: list[int] | None = None
    sub_keys: list[str] | None = None


def _packed_token_fields(samples: list[EncodedSample], laid_out: list[int]) -> dict[str, torch.Tensor] | None:
    """The samples' per-token fields end to end, each padded with 0 to its laid-out width."""
    keys = list(dict.fromkeys(k for s in samples if s.token_fields for k in s.token_fields))
    if not keys:
        return None
    out = {}
    for key in keys:
        dtype = next(s.token_fields[key].dtype for s in samples if s.token_fields and key in s.token_fields)
        row = torch.zeros(sum(laid_out), dtype=dtype)
        start = 0
        for sample, width in zip(samples, laid_out, strict=True):
            if sample.token_fields and key in sample.token_fields:
                row[start : start + sample.length] = sample.token_fields[key]
            start += width
        out[key] = row
    return out


class PackAssemblyMixin:
    """Energon's ``pack_selected_samples`` hook and the packed batch's ``PackedSeqParams``.

    Mixed into :class:`~energon_plugins.PluginTaskEncoder` through ``PackingMixin``; uses its
    ``packing_capacity`` and ``pad_to_multiple_of`` (from the selection half),
    ``pad_token_id``, ``ignore_index``, ``complete_samples`` and the ``combine_*`` helpers.
    """

    if TYPE_CHECKING:  # what the host encoder and the selection half provide

        @property
        def packing_capacity(self) -> int: ...

        @property
        def pad_to_multiple_of(self) -> int: ...

        @property
        def pad_token_id(self) -> int: ...

        @property
        def ignore_index(self) -> int: ...

        def complete_samples(
            self, samples: list[EncodedSample]
        ) -> tuple[list[EncodedSample], torch.Tensor | None]: ...

        def combined_pixels(
            self, samples: list[EncodedSample], completed: torch.Tensor | None
        ) -> torch.Tensor | None: ...

        def combine_parts(self, key: str, parts: list[torch.Tensor | None]) -> torch.Tensor | None: ...

        def combine_visual(
            self, visuals: list[dict[str, torch.Tensor] | None]
        ) -> dict[str, torch.Tensor] | None: ...

    def truncate_for_packing(self, sample: EncodedSample, capacity: int) -> EncodedSample:
        """Cut an overlong ``sample`` to ``capacity`` tokens.

        When the encoder knows its image token (``image_token_id``) and the cut would remove
        image tokens, the sample is cut before its first image token and keeps no image
        (images cannot be split); videos likewise by ``video_token_id`` and audio clips by
        ``audio_token_id`` (then no media at all is kept: the features of every kind live
        together in ``visual``). Otherwise tokens are cut and the media kept. Override for a
        smarter cut.
        """
        cut = capacity
        pixel_values, grid, num_images = sample.pixel_values, sample.image_grid_thw, sample.num_images
        visual, counts = sample.visual, sample.image_token_counts
        num_videos, video_counts = sample.num_videos, sample.video_token_counts
        is_media = torch.zeros_like(sample.input_ids, dtype=torch.bool)
        for present, token_id in (
            (num_images, getattr(self, "image_token_id", None)),
            (num_videos, getattr(self, "video_token_id", None)),
        ):
            if present and isinstance(token_id, int):
                is_media |= sample.input_ids == token_id
        audio_token_id = getattr(self, "audio_token_id", None)
        if isinstance(audio_token_id, int):  # no count of clips on the sample: its tokens tell
            is_media |= sample.input_ids == audio_token_id
        if bool(is_media[cut:].any()):  # media cannot be split: cut before the first, keep none
            cut = min(cut, int(is_media.nonzero()[0, 0]))
            pixel_values, grid, num_images, visual, counts = None, None, 0, None, []
            num_videos, video_counts = 0, []
        token_fields = (
            {key: value[:cut] for key, value in sample.token_fields.items()} if sample.token_fields else None
        )
        return EncodedSample.derive_from(
            sample,
            input_ids=sample.input_ids[:cut],
            labels=sample.labels[:cut],
            loss_mask=sample.loss_mask[:cut],
            pixel_values=pixel_values,
            image_grid_thw=grid,
            num_images=num_images,
            seq_lengths=[cut],
            truncated=True,
            visual=visual,
            token_fields=token_fields,
            image_token_counts=counts,
            num_videos=num_videos,
            video_token_counts=video_counts,
        )

    @stateless
    def pack_selected_samples(self, samples: list[EncodedSample]) -> PackedSample:
        """Concatenate one group into a :class:`PackedSample` (each part padded to the multiple).

        Padding tokens get the pad id, the ignore index as label and loss mask 0.
        """
        if not samples:
            raise ValueError("pack_selected_samples() got an empty group")
        capacity = self.packing_capacity
        multiple = self.pad_to_multiple_of
        pad_id, ignore = int(self.pad_token_id), int(self.ignore_index)
        samples, all_pixels = self.complete_samples(samples)
        if any(s.length > capacity for s in samples):
            all_pixels = None  # a cut may drop images: concatenate what is kept
            samples = [self.truncate_for_packing(s, capacity) if s.length > capacity else s for s in samples]
        ids, labels, masks, real, laid_out = [], [], [], [], []
        for sample in samples:
            n = sample.length
            width = round_up(n, multiple)
            pad = width - n
            ids.append(sample.input_ids.to(torch.long))
            labels.append(sample.labels.to(torch.long))
            masks.append(sample.loss_mask.to(torch.float32))
            if pad:
                ids.append(torch.full((pad,), pad_id, dtype=torch.long))
                labels.append(torch.full((pad,), ignore, dtype=torch.long))
                masks.append(torch.zeros(pad, dtype=torch.float32))
            real.append(n)
            laid_out.append(width)
        if sum(laid_out) > capacity:  # plan_buffer checks this; never skip samples silently
            raise FatalSampleError(
                f"pack of {len(samples)} samples takes {sum(laid_out)} tokens, more than the "
                f"capacity {capacity} (the packing strategy broke its contract)"
            )
        keys = [str(s.__key__) for s in samples]
        sources = tuple(src for s in samples for src in (s.__sources__ or ()))
        counts = [s.image_token_counts for s in samples]
        video_counts = [s.video_token_counts for s in samples]
        # per-image token counts survive packing only when every sample has them
        image_token_counts = None if None in counts else [n for c in counts if c is not None for n in c]
        video_token_counts = (
            None if None in video_counts else [n for c in video_counts if c is not None for n in c]
        )
        return PackedSample.derive_from(
            samples[0],
            __key__=",".join(keys),
            __sources__=sources or None,
            input_ids=torch.cat(ids),
            labels=torch.cat(labels),
            loss_mask=torch.cat(masks),
            pixel_values=self.combined_pixels(samples, all_pixels),
            image_grid_thw=self.combine_parts("image_grid_thw", [s.image_grid_thw for s in samples]),
            num_images=sum(int(s.num_images) for s in samples),
            seq_lengths=laid_out,
            real_seq_lengths=real,
            sub_keys=keys,
            truncated=any(bool(s.truncated) for s in samples),
            visual=self.combine_visual([s.visual for s in samples]),
            token_fields=_packed_token_fields(samples, laid_out),
            image_token_counts=image_token_counts,
            num_videos=sum(int(s.num_videos) for s in samples),
            video_token_counts=video_token_counts,
        )

    def finish_packed_batch(self, samples: list[EncodedSample], batch: Any) -> Any:
        """Give a collated batch of packed rows THD ``PackedSeqParams`` and no attention mask.

        ``PluginTaskEncoder.batch`` calls it last. The ``*_padded`` offsets are set whenever
        ``pad_to_multiple_of`` > 1. A batch without :class:`PackedSample` rows is returned as is.
        """
        if not any(isinstance(s, PackedSample) for s in samples):
            return batch
        width = int(batch.input_ids.shape[1])
        real_segments: list[int] = []
        padded_segments: list[int] = []
        for sample in samples:
            laid_out = list(sample.seq_lengths or [sample.length])
            real = list(getattr(sample, "real_seq_lengths", None) or laid_out)
            real_segments.extend(real)
            padded_segments.extend(laid_out)
            tail = width - sample.length
            if tail > 0:
                real_segments.append(tail)
                padded_segments.append(tail)
        batch.packed_seq_params = packed_seq_params(
            real_segments, padded_segments, always_padded=self.pad_to_multiple_of > 1
        )
        batch.attention_mask = None
        return batch
