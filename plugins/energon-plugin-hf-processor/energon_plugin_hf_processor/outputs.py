"""One processor call, and its outputs read as the fields of an encoded sample.

:func:`call_processor` calls the processor on one rendered text, its images and its
pre-sampled videos, as ``apply_chat_template`` does, with token and placeholder-expansion
offsets. :func:`label_tokens` turns the answers' character spans into the token mask of the
labels (never over an image's or a video's tokens) and counts each medium's embedding tokens;
:func:`output_layout`, :func:`visual_inputs` and :func:`unused_outputs` read the other outputs
by the family's :class:`~energon_plugin_hf_processor.families.FamilySpec`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from energon_plugin_hf_processor.families import GENERIC, FamilySpec, generic_layout
from energon_plugin_hf_processor.fast_calls import int_lists_as_tensors
from energon_plugin_hf_processor.labels import expanded_positions, token_mask
from energon_plugins import energon_image_to_pil

#: Processor outputs that are not model inputs of the sample (or are read separately).
TEXT_KEYS = ("input_ids", "attention_mask", "offset_mapping", "text_replacement_offsets")


def call_processor(
    processor: Any,
    text: str,
    images: Sequence[Any],
    frames: Sequence[Any] = (),
    *,
    call_kwargs: dict[str, Any],
    image_kwargs: dict[str, Any],
    videos_kwargs: dict[str, Any] | None = None,
    audios: Sequence[Any] = (),
    audio_kwargs: dict[str, Any] | None = None,
) -> Any:
    """The processor on one rendered text, its images, its videos' frames and its audio clips.

    Offsets of every token and of every placeholder expansion come back too. Only the image
    and video processors are asked for tensors (some processors read their shapes); the text
    comes back as lists, converted here as the processor's own last step converts
    (``BatchFeature``): the tokenizer asked for ``"pt"`` walks every token and offset in
    Python first (``flatten``), 10-45% of the call on 600-token samples. The output is the
    same, tensor for tensor.

    Args:
        processor: the transformers processor.
        text: the rendered conversation (a leading bos means no special tokens are added).
        images: the sample's images, as stored.
        frames: each video's decoded frames.
        call_kwargs: keyword arguments of every call (``processor_kwargs``, pixel budget).
        image_kwargs: extra ``images_kwargs`` (the images' pixel budget).
        videos_kwargs: the ``videos_kwargs`` of the pre-sampled videos.
        audios: each audio clip's ``(N,)`` mono waveform at the feature extractor's rate.
        audio_kwargs: the ``audio_kwargs`` of the clips (their sampling rate).
    """
    from transformers import BatchFeature

    bos = getattr(processor.tokenizer, "bos_token", None)
    kwargs = dict(call_kwargs)
    if bos is not None and text.startswith(bos):
        kwargs["add_special_tokens"] = False
    pil = [energon_image_to_pil(image) for image in images]
    if pil:
        kwargs["images_kwargs"] = {**image_kwargs, "return_tensors": "pt"}
    if frames:
        kwargs["videos_kwargs"] = {**(videos_kwargs or {}), "return_tensors": "pt"}
    if len(audios):
        kwargs["audio"] = list(audios)
        kwargs["audio_kwargs"] = {**(audio_kwargs or {}), "return_tensors": "pt"}
    else:  # as apply_chat_template calls every processor (Qwen3-ASR's requires ``audio``)
        kwargs["audio"] = None
    out = processor(
        text=[text],
        images=[pil] if pil else None,
        videos=list(frames) if frames else None,
        return_offsets_mapping=True,
        return_text_replacement_offsets=True,
        **kwargs,
    )
    skip = getattr(processor, "skip_tensor_conversion", None)
    return BatchFeature(int_lists_as_tensors(dict(out), skip), tensor_type="pt", skip_tensor_conversion=skip)


@dataclasses.dataclass
class TokenLabels:
    """The token ids of one processor output and which of them are labels."""

    #: The token ids (with the appended eos, if one was asked for).
    input_ids: torch.Tensor
    #: Per token, whether it is a label (inside an answer, outside every image and video).
    labelled: np.ndarray
    #: Per image, its embedding tokens (all its expansion's tokens without an embedding token).
    image_token_counts: list[int]
    #: Per video, likewise.
    video_token_counts: list[int]
    #: The family's per-token outputs (``token_fields``), as long as ``input_ids``.
    token_fields: dict[str, torch.Tensor]


def output_layout(family: FamilySpec, out: Any, num_images: int, num_videos: int) -> FamilySpec:
    """``family``, or for the generic family the layout guessed from this output's shapes."""
    if family is not GENERIC:
        return family
    return generic_layout(out, num_images, len(out["input_ids"][0]), num_videos)


def label_tokens(
    out: Any,
    spans: Sequence[tuple[int, int]],
    layout: FamilySpec,
    image_token_id: int | None,
    video_token_id: int | None,
    eos_token_id: int | None = None,
) -> TokenLabels:
    """The labels of the tokens inside ``spans`` (character spans of the rendered text).

    The spans are moved through the placeholder expansions the processor reports
    (``text_replacement_offsets``); an image's or video's tokens are never labels. With
    ``eos_token_id``, that token is appended (labelled) unless the ids already end with it.
    """
    ids = out["input_ids"][0].to(torch.long)
    offsets = np.asarray(out["offset_mapping"][0])
    reported = out.get("text_replacement_offsets")  # a (1, 0) tensor when empty (InternVL)
    replacements = list(reported[0]) if reported is not None and len(reported) else []
    shifted = expanded_positions([p for span in spans for p in span], replacements)
    labelled = token_mask(offsets, list(zip(shifted[0::2], shifted[1::2])))
    media = {
        kind: [token_mask(offsets, [r["new_span"]]) for r in replacements if r["type"] == kind]
        for kind in ("image", "video")
    }
    for mask in media["image"] + media["video"]:
        labelled &= ~mask
    for r in replacements:  # an audio clip's tokens are never labels either
        if r["type"] == "audio":
            labelled &= ~token_mask(offsets, [r["new_span"]])
    ids_np = ids.numpy()

    def count(masks: list[np.ndarray], token_id: int | None) -> list[int]:
        return [int((ids_np[m] == token_id).sum()) if token_id is not None else int(m.sum()) for m in masks]

    token_fields = {
        key: torch.as_tensor(out[key][0]).to(torch.long)
        for key in layout.token_fields
        if out.get(key) is not None
    }
    if isinstance(eos_token_id, int) and (len(ids_np) == 0 or ids_np[-1] != eos_token_id):
        ids = torch.cat([ids, torch.tensor([eos_token_id])])
        labelled = np.append(labelled, True)
        token_fields = {k: torch.cat([v, v.new_zeros(1)]) for k, v in token_fields.items()}
    return TokenLabels(
        ids,
        labelled,
        count(media["image"], image_token_id),
        count(media["video"], video_token_id),
        token_fields,
    )


def visual_inputs(out: Any, layout: FamilySpec) -> dict[str, torch.Tensor]:
    """The family's further vision inputs (``visual``) this output holds, as tensors (with
    the frame masks of :attr:`~.families.FamilySpec.filled_masks` the call left out)."""
    visual = {key: torch.as_tensor(out[key]) for key in layout.visual if out.get(key) is not None}
    for mask, features in layout.filled_masks.items():
        if mask not in visual and features in visual:
            visual[mask] = torch.ones(visual[features].shape[:2], dtype=torch.bool)
    return visual


def unused_outputs(out: Any, layout: FamilySpec) -> list[str]:
    """The output keys the family neither keeps nor drops (they are left out of the sample)."""
    kept = {"pixel_values", layout.grid, *layout.visual, *layout.token_fields, *layout.drop, *TEXT_KEYS}
    return [key for key in out if key not in kept]
