"""The family spec type and its named combine rules.

A :class:`FamilySpec` says how one model family's processor outputs become sample fields
and how each key's tensors combine across the samples of a pack or batch (a
:data:`COMBINE` rule). The built-in rows are in :mod:`.family_table`; the registry that
looks a processor's spec up is :mod:`.families` (which re-exports every name here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from energon_plugin_hf_processor.batch_layouts import BATCH_LAYOUTS
from energon_plugins import concatenated

Combine = Callable[[list[Any]], Any]


def concat(parts: list[Any]) -> Any:
    """One entry per image (or patch) along dim 0: concatenate (Qwen patches, image sizes).

    Every rule writes into the core's output memory
    (:func:`~energon_plugins.encoding.memory.outputs.concatenated`: shared memory
    in a loader worker, reused arrays elsewhere)."""
    return concatenated(parts, dim=0)


def _padded(parts: list[Any], first_dim: int, value: float = 0.0) -> list[Any]:
    """Pad every dim from ``first_dim`` on with ``value`` (zeros) to the largest size among ``parts``."""
    import torch.nn.functional as F

    target = [max(int(p.shape[d]) for p in parts) for d in range(first_dim, parts[0].dim())]
    out = []
    for part in parts:
        pad: list[int] = []
        for d in reversed(range(first_dim, part.dim())):
            pad += [0, target[d - first_dim] - int(part.shape[d])]
        out.append(F.pad(part, pad, value=value) if any(pad) else part)
    return out


def pad_concat(parts: list[Any]) -> Any:
    """One entry per image along dim 0, the other dims zero-padded to the largest first.

    What a processor does within one call: LLaVA-NeXT / OneVision pad each image's tiles to
    the largest tile count, Pixtral pads images to the largest height and width.
    """
    if len({p.shape[1:] for p in parts}) == 1:
        return concatenated(parts, dim=0)
    return concatenated(_padded(parts, 1), dim=0)


def pad_concat_ones(parts: list[Any]) -> Any:
    """:func:`pad_concat` padding with ones: masks whose padded entries are all-visible, as
    Phi-4-multimodal's image processor pads the crop masks of a call on several images."""
    if len({p.shape[1:] for p in parts}) == 1:
        return concatenated(parts, dim=0)
    return concatenated(_padded(parts, 1, value=1), dim=0)


def image_row(parts: list[Any]) -> Any:
    """``(1, n, ...)``: all images of the batch in one row (Idefics3 / SmolVLM sub-images).

    The model flattens ``(B, n)`` and fills the image tokens of the whole batch in order, so
    one row of every image is what it reads, without the all-zero padding images that a
    ``(B, max n)`` layout adds.
    """
    if len({p.shape[2:] for p in parts}) != 1:
        parts = _padded(parts, 2)
    return concatenated(parts, dim=1)


COMBINE: dict[str, Combine] = {
    "concat": concat,
    "pad_concat": pad_concat,
    "pad_concat_ones": pad_concat_ones,
    "image_row": image_row,
}
"""Named combine rules of :attr:`FamilySpec.visual` and :attr:`FamilySpec.pixel_values`."""


def register_combine(name: str, combine: Combine) -> None:
    """Name a combine rule (``combine(parts) -> tensor``) that family specs can use."""
    if name in COMBINE and COMBINE[name] is not combine:
        raise ValueError(f"combine rule {name!r} is already registered")
    COMBINE[name] = combine


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """How one family's processor outputs become :class:`~energon_plugins.EncodedSample` fields.

    Attributes:
        name: the family name (shown by ``preview`` and in errors).
        processors: processor class names this spec serves (``Qwen2VLProcessor``, ...).
        pixel_values: combine rule of ``pixel_values`` (a :data:`COMBINE` name).
        grid: the output that becomes ``EncodedSample.image_grid_thw`` (``image_grid_thw``),
            or ``None``.
        visual: further outputs kept as ``EncodedSample.visual`` entries, each with its
            combine rule (``{"image_sizes": "concat"}``). Keys are the model ``forward``'s
            keyword arguments.
        token_fields: per-token outputs ``(1, L)`` kept as ``EncodedSample.token_fields``
            (``token_type_ids`` of Gemma 3, ``mm_token_type_ids`` of Qwen).
        embedding_token: the token whose positions the model fills with image embeddings,
            as an attribute of the processor or of its tokenizer (``image_token``); an
            image's token count is the number of these in its expanded placeholder.
        video_embedding_token: likewise for videos (``video_token``; InternVL and SmolVLM
            fill their ``image_token`` with video frames).
        pixel_budget: the image (and video) processor takes ``min_pixels`` / ``max_pixels``
            (as its ``size`` edges).
        fixed_video_frames: the model takes the videos of a batch as one ``(videos, frames,
            C, H, W)`` tensor, so every video needs the same frame count (``video.num_frames``;
            LLaVA-OneVision); the budget cannot trade frames.
        video_with_images: the processor takes images and videos in one call (SmolVLM's
            cannot: its videos and images share ``pixel_values``; GLM-4V's model cannot:
            its images and video frames share a token).
        drop: outputs the model does not take (left out of the sample).
        end_of_turn: the special tokens that may close an answer (labelled with it);
            ``None``: every special token of the tokenizer but the media ones; ``()``: none
            (GLM-V: the next turn's role token opens that turn, the last answer ends the text).
        default_combine: the combine rule of keys the spec does not name.
        processor_attrs: attribute values the processor must have for this spec to serve it,
            for a spec that shares its processor classes with another: where they match it
            is picked over that one (Mistral 3's ``PixtralProcessor`` has
            ``spatial_merge_size`` 2, Pixtral's 1).
        system_as_text: the chat template takes a system message's content as a string, not
            as a list of parts (Pixtral's writes ``"[INST]" + system_message``); the same as
            ``"system"`` in :attr:`text_roles`.
        text_roles: the roles whose content reaches the chat template as a string, its text
            parts joined, not as a list of parts (HunyuanOCR's writes
            ``{{ message['content'] }}`` for an answer and reads a system content's text as a
            string). :attr:`template_text_roles` adds ``"system"`` for :attr:`system_as_text`.
        placeholder_offsets: for a processor that does not report its placeholder
            expansions (``text_replacement_offsets``; Idefics2), the name of a
            :data:`~.placeholder_offsets.PLACEHOLDER_OFFSETS` function that computes them.
        batch_layout: for a model that takes its vision inputs per row (Mllama), the name of
            a :data:`~.batch_layouts.BATCH_LAYOUTS` function that lays every collated batch
            out so; ``None``: the combine rules' layout is the batch's.
        max_audio_clips: the most audio clips the processor takes in one text (GLM-ASR and
            Audio Flamingo 3 take one: ``len(text) != len(audio)`` raises); a sample with
            more is skipped and counted (``audio_count``). ``None``: no limit.
        filled_masks: ``{mask: features}``: a frame mask the processor leaves out of a call
            with one clip (Phi-4-multimodal's ``audio_attention_mask``) is added, all true
            over the features' ``(clips, frames)``, so every clip of a batch has its row, as
            the processor's own call on several clips gives.
        image_per_user_turn: the chat template writes one image's tokens in every user turn,
            whatever the turn holds, and the processor raises without images (PP-Chart2Table's
            fixed ``Chart to table`` turn): a sample is kept only with as many images as user
            turns; one without images is skipped and counted (``no_image``), one with another
            count, or running text (an interleaved sample), likewise (``image_count``).
    """

    name: str
    processors: tuple[str, ...]
    pixel_values: str = "concat"
    grid: str | None = None
    visual: dict[str, str] = dataclasses.field(default_factory=dict)
    token_fields: tuple[str, ...] = ()
    embedding_token: str = "image_token"
    video_embedding_token: str = "video_token"
    pixel_budget: bool = False
    fixed_video_frames: bool = False
    video_with_images: bool = True
    drop: tuple[str, ...] = ()
    default_combine: str = "concat"
    end_of_turn: tuple[str, ...] | None = None
    processor_attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    system_as_text: bool = False
    text_roles: tuple[str, ...] = ()
    placeholder_offsets: str | None = None
    batch_layout: str | None = None
    max_audio_clips: int | None = None
    filled_masks: dict[str, str] = dataclasses.field(default_factory=dict)
    image_per_user_turn: bool = False

    def __post_init__(self) -> None:
        rules = {"pixel_values": self.pixel_values, "(default)": self.default_combine, **self.visual}
        for key, rule in rules.items():
            if rule not in COMBINE:
                raise ValueError(
                    f"family {self.name!r}: {key} has combine rule {rule!r}; known rules: "
                    f"{', '.join(sorted(COMBINE))} (add one with register_combine)"
                )
        if self.batch_layout is not None and self.batch_layout not in BATCH_LAYOUTS:
            raise ValueError(
                f"family {self.name!r}: batch layout {self.batch_layout!r}; known layouts: "
                f"{', '.join(sorted(BATCH_LAYOUTS))} (add one with register_batch_layout)"
            )

    @property
    def template_text_roles(self) -> tuple[str, ...]:
        """The roles whose content the chat template takes as a string: :attr:`text_roles`,
        and ``system`` where :attr:`system_as_text` is set."""
        if self.system_as_text and "system" not in self.text_roles:
            return ("system", *self.text_roles)
        return self.text_roles

    def image_turn_problem(
        self, messages: list[dict[str, Any]] | None, num_images: int
    ) -> tuple[str, str] | None:
        """Why a sample does not fit :attr:`image_per_user_turn` (its skip reason and what it
        holds), or ``None`` where it fits or the family writes images where they are.

        Args:
            messages: the sample's messages; ``None`` for running text (an interleaved sample).
            num_images: its images.
        """
        if not self.image_per_user_turn:
            return None
        takes = f"family {self.name!r} writes one image in every user turn"
        if not num_images:
            return "no_image", f"no image; {takes} and its processor raises without one"
        if messages is None:
            return "image_count", f"{num_images} images in running text; {takes} of a conversation"
        turns = sum(message["role"] == "user" for message in messages)
        if num_images != turns:
            return "image_count", f"{num_images} images in {turns} user turns; {takes}"
        return None

    def combine(self, key: str) -> Combine:
        """The combine function of output ``key`` (:attr:`default_combine` for keys it does not name)."""
        if key == "pixel_values":
            return COMBINE[self.pixel_values]
        return COMBINE[self.visual.get(key, self.default_combine)]
