"""Fitting a sample's videos into the visual-token budget and ``seq_length``.

:func:`encode_fitting_videos` reads each video's metadata, then tries the budget's plans best
first (fewer frames, then lower resolution): a plan the processor can count without decoding
is checked first; otherwise (or when it fits) only the plan's frames are decoded, the sample
is encoded and measured. The first plan that fits is the sample; with none, the sample is
skipped (counted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from megatron.energon.errors import FatalSampleError

from energon_plugin_hf_processor.video import ProcessorVideo
from energon_plugins import (
    CountedSkip,
    EncodedSample,
    SampledVideo,
    VideoPlan,
    as_av_decoder,
    budget_misfit,
    budget_skip,
    decode_frames,
    frame_indices,
    read_video_info,
)

#: Encodes the sample with these decoded videos under this plan (no length check).
EncodeWithVideos = Callable[[list[SampledVideo], VideoPlan], EncodedSample]


def encode_fitting_videos(
    sample: Any,
    videos: list[tuple[Any, str]],
    video: ProcessorVideo,
    *,
    has_images: bool,
    seq_length: int,
    encode: EncodeWithVideos,
) -> EncodedSample:
    """Sample the videos, then try the budget's plans until one fits.

    Args:
        sample: the Energon sample (its key names it in errors).
        videos: each video as ``(Energon's AVDecoder or bytes, the file it came from)``.
        video: the processor's video side (its family and ``video`` options).
        has_images: whether the sample also holds images.
        seq_length: the longest sample kept.
        encode: encodes the sample with decoded videos under a plan.

    Raises:
        ValueError: the processor has no video processor, or its family cannot take images
            and videos in one sample.
        FatalSampleError: a fixed-frame family without ``video.num_frames``.
        CountedSkip: a video shorter than ``video.num_frames`` (fixed-frame families), or no
            plan fits.
    """
    key = getattr(sample, "__key__", None)
    family, options = video.family, video.options
    if not video.available:
        raise ValueError(
            f"sample {key!r} holds videos, but {type(video.processor).__name__} has no video processor"
        )
    if has_images and not family.video_with_images:
        raise ValueError(
            f"sample {key!r}: the {family.name} processor cannot take images and videos in one sample"
        )
    if family.fixed_video_frames and options.num_frames is None:
        raise FatalSampleError(
            f"task_encoder.options.video.num_frames: {family.name} takes the videos of a "
            "batch as one (videos, frames, ...) tensor, so every video needs the same frame "
            "count; set video.num_frames"
        )
    decoders = [(as_av_decoder(value, label), label) for value, label in videos]
    infos = [read_video_info(decoder, label) for decoder, label in decoders]
    if family.fixed_video_frames:
        short = [label for (_, label), info in zip(decoders, infos) if info.num_frames < options.num_frames]
        if short:
            raise CountedSkip(
                "video_frames",
                f"sample {key!r}: video {short[0]} has fewer "
                f"than video.num_frames={options.num_frames} frames",
            )
    budget = options.max_visual_tokens
    known: tuple[int, int] | None = None  # (tokens besides the videos', image tokens)
    why = ""
    for plan in video.plans(infos):
        predicted = video.predicted_tokens(infos, plan)
        if predicted is not None:
            visual = sum(predicted) + (known[1] if known else 0)
            length = sum(predicted) + known[0] if known else None
            why = budget_misfit(visual, length, budget, seq_length)
            if why:
                continue
        sampled = [
            decode_frames(decoder, info, frame_indices(info.num_frames, n), label)
            for (decoder, label), info, n in zip(decoders, infos, plan.frames)
        ]
        encoded = encode(sampled, plan)
        video_tokens = sum(encoded.video_token_counts or ())
        image_tokens = sum(encoded.image_token_counts or ())
        known = (encoded.length - video_tokens, image_tokens)
        why = budget_misfit(video_tokens + image_tokens, encoded.length, budget, seq_length)
        if not why:
            return encoded
    raise budget_skip(key, why)
