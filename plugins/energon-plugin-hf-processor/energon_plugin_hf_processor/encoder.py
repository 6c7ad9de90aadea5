"""The ``hf-processor`` task encoder: a model's own transformers processor encodes each sample.

For every sample the encoder builds the messages the processor's chat template renders
(:mod:`.messages`), renders them once and finds the assistant answers (:mod:`.labels`), then
calls the processor on the rendered text, the images and the videos, exactly as
``processor.apply_chat_template(messages, tokenize=True, return_dict=True)`` does
(:mod:`.outputs`). So the token ids (image and video placeholders expanded), the pixel values
and every other vision input are the processor's own. Labels are the token ids inside the
answers (end-of-turn token included), the ignore index elsewhere; images and videos never
carry labels.

Videos arrive as Energon's lazy ``AVDecoder``: the encoder reads each video's metadata, picks
the frames the ``video`` options keep, decodes only those (seeking) and hands them to the
processor pre-sampled, with their metadata (frame rate, frame numbers), as transformers'
``do_sample_frames=False`` path takes them. Audio clips (``0.wav``, ``1.flac``...) at their
``<audio>`` tags are decoded only as far as the ``audio`` budget keeps them and resampled once
to the feature extractor's rate (:mod:`.audio`). A sample over its visual-token budget (or
``seq_length``) gives up frames, then resolution, before it is skipped (:mod:`.video_fit`,
:mod:`.video`).

The processor's outputs become :class:`~energon_plugins.EncodedSample` fields by the
family's :class:`~energon_plugin_hf_processor.families.FamilySpec`, which also says how each
vision input combines when packing and batching (:meth:`collate_visual`). A sample longer
than ``seq_length`` is skipped and counted (``too_long``, never cut inside an image), or fails
under ``on_error: raise``; so is a sample with more than ``max_images`` images. The processor
is loaded and read once, when the encoder is built (:mod:`.processor`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from megatron.energon import (
    CaptioningSample,
    InterleavedSample,
    SampleDecoder,
    VidQASample,
    VQASample,
    stateless,
)

from energon_plugin_hf_processor import outputs
from energon_plugin_hf_processor.audio import DecodedAudio, ProcessorAudio, labelled_audios
from energon_plugin_hf_processor.audio_in_video import AudioInVideo
from energon_plugin_hf_processor.audio_preview import PreviewAudio
from energon_plugin_hf_processor.batch_layouts import RowLayouts
from energon_plugin_hf_processor.families import FamilySpec, family_for
from energon_plugin_hf_processor.fast_calls import calling_processor
from energon_plugin_hf_processor.image_preview import PreviewImages
from energon_plugin_hf_processor.labels import ChatRenderer
from energon_plugin_hf_processor.messages import check_images, interleaved_text, sample_messages
from energon_plugin_hf_processor.options import HFProcessorOptions
from energon_plugin_hf_processor.placeholder_offsets import PLACEHOLDER_OFFSETS, PlaceholderOffsets
from energon_plugin_hf_processor.processor import (
    embedding_token_id,
    end_of_turn_tokens,
    image_placeholder,
    load_processor,
    prepended_chars,
    processor_call_kwargs,
)
from energon_plugin_hf_processor.tiles import MAX_TILES, tile_limits
from energon_plugin_hf_processor.video import ProcessorVideo
from energon_plugin_hf_processor.video_fit import encode_fitting_videos
from energon_plugins import (
    MEGATRON_LM_SAMPLE_TYPES,
    BuildContext,
    ChatMLSample,
    ConfigError,
    CountedSkip,
    EncodedSample,
    PluginTaskEncoder,
    SampledVideo,
    VideoPlan,
    as_encodable,
    conversation_cookers,
)

logger = logging.getLogger(__name__)


class HFProcessorTaskEncoder(PreviewAudio, PreviewImages, RowLayouts, PluginTaskEncoder[Any]):
    """Encode conversations (with images and videos), VQA (on an image or a video), captioning,
    interleaved samples and Megatron-LM's sample types (OCR, multiple-choice VQA,
    similarity-interleaved, text) with a model's processor.

    Args:
        context: the build context (its tokenizer and image processor are replaced by the
            processor's own).
        options: :class:`~energon_plugin_hf_processor.options.HFProcessorOptions`.
        processor: an already loaded processor (tests, notebooks); ``options.processor`` is
            then not loaded.

    Attributes:
        processor: the transformers processor.
        family: its :class:`~energon_plugin_hf_processor.families.FamilySpec`.
    """

    cookers = conversation_cookers()
    supported_sample_types = (
        ChatMLSample,
        VQASample,
        VidQASample,
        CaptioningSample,
        InterleavedSample,
        *MEGATRON_LM_SAMPLE_TYPES,
    )
    #: Images reach the processor as the 8-bit images they were stored as; videos as Energon's
    #: lazy AVDecoder (only the kept frames are decoded, in encode_sample).
    decoder = SampleDecoder(image_decode="pil", av_decode="AVDecoder")

    def __init__(
        self,
        context: BuildContext,
        options: HFProcessorOptions,
        processor: Any = None,
    ) -> None:
        processor = processor if processor is not None else load_processor(options, context.tokenizer)
        tokenizer = processor.tokenizer
        if context.tokenizer is not None and len(context.tokenizer) != len(tokenizer):
            logger.warning(
                "hf-processor: the configured tokenizer has %d tokens, the processor's %d; "
                "the processor's tokenizer is used",
                len(context.tokenizer),
                len(tokenizer),
            )
        image_processor = getattr(processor, "image_processor", None)  # None: an audio-only processor
        context = context.replace(tokenizer=tokenizer, image_processor=image_processor)
        super().__init__(context, on_error=options.on_error, padding=options.padding)
        self.options = options
        self.processor = processor
        #: The processor the calls go through: ``processor`` with a faster image processor
        #: and its keyword-argument merge remembered, the same outputs (:mod:`.fast_calls`).
        self.calling_processor = calling_processor(processor)
        try:
            self.family: FamilySpec = family_for(processor, options.family)
        except ValueError as exc:
            raise ConfigError(f"task_encoder.options.family: {exc}") from exc
        try:
            end_of_turn = self.family.end_of_turn
            self.renderer = ChatRenderer(
                processor,
                end_of_turn_tokens(processor) if end_of_turn is None else end_of_turn,
                text_roles=self.family.template_text_roles,
            )
        except ValueError as exc:
            raise ConfigError(f"task_encoder.options.processor: {exc}") from exc
        self.image_tag = self.sample_config.image_token
        self.video_tag = self.sample_config.video_token
        #: Keyword arguments of every processor call, and the extra ``images_kwargs``.
        self.call_kwargs, self.image_kwargs = processor_call_kwargs(processor, self.family, options)
        #: The processor's video side (frame multiple, pixel cap, call arguments, token counts).
        self.video = ProcessorVideo(processor, self.family, options.video, self.call_kwargs)
        #: The processor's audio side (sampling rate, budget, decoding: :mod:`.audio`).
        self.audio = ProcessorAudio(processor, options.audio)
        self.audio_in_video = AudioInVideo(processor, self.audio)  # audio.use_audio_in_video
        self.audio_tag = options.audio.tag
        #: The token whose positions hold audio embeddings; ``None`` without audio.
        self.audio_token_id = embedding_token_id(processor, "audio_token") if self.audio.available else None
        #: The token whose positions hold image embeddings (counted per image).
        self.image_token_id = embedding_token_id(processor, self.family.embedding_token)
        #: The token whose positions hold video embeddings (counted per video); ``None``
        #: without a video processor.
        self.video_token_id = (
            embedding_token_id(processor, self.family.video_embedding_token) if self.video.available else None
        )
        #: What the chat template writes for one image in running text (interleaved samples).
        self.image_placeholder = image_placeholder(processor, self.renderer, self.image_tag)
        #: Where the processor expands placeholders, for one that does not report it.
        self.placeholder_offsets = placeholder_offsets_of(self.family)
        #: Characters the processor puts before every text (answer spans move by as many;
        #: computed placeholder offsets report every edit, that one included).
        self.prepended_chars = prepended_chars(processor) if self.placeholder_offsets is None else 0
        #: Maxima of tiles per image to try on a long sample (``degrade_tiles``; empty: off).
        self.tile_limits = tile_limits(image_processor, options.degrade_tiles, options.tile_degradation)
        self._warned: set[str] = set()
        self._check_with_one_call()

    # ------------------------------------------------------------------ set-up
    def _check_with_one_call(self) -> None:
        """Encode one tiny conversation, so bad settings fail now with the option named."""
        from PIL import Image

        sample: Any = VQASample(
            __key__="hf-processor-set-up-check",
            __restore_key__=(),
            image=Image.new("RGB", (32, 32), (128, 64, 32)),
            context="?",
            answers=["ok"],
        )
        if self.image_processor is None:  # an audio-only processor: a text-only conversation
            turns = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "ok"}]
            sample = ChatMLSample(__key__=sample.__key__, __restore_key__=(), conversation=turns, images=[])
        try:
            messages, images, _ = self.sample_messages(sample)
            text, spans = self.renderer.render_conversation(messages)
            #: Tokens of the shortest one-image sample (a 32x32 image, one-word turns).
            self.shortest_sample = self._encode(sample, text, spans, images, check_length=False)
        except Exception as exc:
            raise ConfigError(
                f"task_encoder hf-processor: {type(self.processor).__name__} failed on a test "
                f"sample with processor_kwargs {self.call_kwargs}: {type(exc).__name__}: {exc}"
            ) from exc

    def preflight_problems(self) -> list[str]:
        """``seq_length`` shorter than the shortest one-image sample (a 32x32 image with one-
        word turns, built when the encoder was): every sample with an image would be skipped."""
        shortest = self.shortest_sample
        if shortest.length <= self.seq_length or self.image_processor is None:
            return []
        return [
            f"seq_length: {self.seq_length} is too small for one image: "
            f"{type(self.processor).__name__} makes a one-image sample of {shortest.length} "
            f"tokens ({sum(shortest.image_token_counts or [0])} for a 32x32 image); every "
            "sample with an image would be skipped"
        ]

    # ------------------------------------------------------------------ dispatch
    @stateless
    def encode_sample(self, sample: Any) -> EncodedSample:
        """Encode one Energon sample (dispatching on its type) to an :class:`EncodedSample`.

        Megatron-LM's sample types are first written as a conversation or running text in
        Megatron-LM's prompt formats (``energon_plugins.as_encodable``, option ``megatron_lm``)."""
        sample = as_encodable(sample, self.options.megatron_lm, self.image_tag) or sample
        if isinstance(sample, InterleavedSample):
            return self._encode_interleaved(sample)
        messages, images, videos = self.sample_messages(sample)
        audios = labelled_audios(sample)
        check_images(messages, len(images), str(sample.__key__), len(videos), len(audios))
        self._check_image_count(sample, len(images), messages)
        self._check_audio_count(sample, len(audios))
        text, spans = self.renderer.render_conversation(messages)
        decoded = self.audio_in_video.decode(sample, messages, audios, videos)
        self.record_preview_audio(sample.__key__, decoded)  # kept only for preview
        return self._encode(sample, text, spans, images, videos, audios=decoded)

    def sample_messages(self, sample: Any) -> tuple[list[dict[str, Any]], list[Any], list[tuple[Any, str]]]:
        """The messages (content as typed parts), images and videos of a conversation-like
        sample; each video as ``(Energon's AVDecoder or bytes, the file it came from)``."""
        return sample_messages(
            sample,
            self.image_tag,
            self.video_tag,
            self.options.system_prompt,
            self.options.caption_prompt,
            self.audio_tag,
        )

    def _encode_interleaved(self, sample: InterleavedSample) -> EncodedSample:
        """Text and images in their order, every text token labelled, eos appended."""
        text, images = interleaved_text(sample, self.image_placeholder)
        self._check_image_count(sample, len(images))
        return self._encode(sample, text, [(0, len(text))], images, append_eos=True)

    def _check_image_count(self, sample: Any, count: int, messages: Any = None) -> None:
        limit = self.options.max_images
        if limit is not None and count > limit:
            raise self._skip(sample, "too_many_images", f"{count} images > max_images {limit}")
        if problem := self.family.image_turn_problem(messages, count):  # messages None: running text
            raise self._skip(sample, *problem)

    def _check_audio_count(self, sample: Any, count: int) -> None:
        """Skip (``audio_count``) more clips than the family's processor takes in one text."""
        limit = self.family.max_audio_clips
        if limit is not None and count > limit:
            what = f"{count} audio clips > {limit}, the most family {self.family.name!r} takes"
            raise self._skip(sample, "audio_count", what)

    def _skip(self, sample: Any, reason: str, what: str) -> CountedSkip:
        """The skip of ``sample``, counted under ``reason``; the base class raises instead under
        ``on_error: raise`` (the sample is lost data, not a chosen policy)."""
        return CountedSkip(reason, f"sample {getattr(sample, '__key__', None)!r}: {what}")

    # ------------------------------------------------------------------ the processor call
    def call_processor(
        self,
        text: str,
        images: list[Any],
        videos: list[SampledVideo] = (),
        plan: VideoPlan | None = None,
        max_tiles: int | None = None,
        audios: Sequence[DecodedAudio] = (),
    ) -> Any:
        """The processor on one rendered text, its images, its pre-sampled videos and its
        decoded audio clips, as
        ``apply_chat_template`` calls it (see :func:`.outputs.call_processor`); ``max_tiles``
        lowers the maximum tiles per image (``degrade_tiles``)."""
        videos_kwargs = self.video.call_kwargs(videos, plan or VideoPlan(())) if videos else None
        image_kwargs = self.image_kwargs if max_tiles is None else {**self.image_kwargs, MAX_TILES: max_tiles}
        return outputs.call_processor(
            self.calling_processor,
            text,
            images,
            [video.frames for video in videos],
            call_kwargs={**self.call_kwargs, **self.audio_in_video.call_kwargs(audios)},
            image_kwargs=image_kwargs,
            videos_kwargs=videos_kwargs,
            audios=[audio.waveform for audio in audios],
            audio_kwargs=self.audio.call_kwargs(),
        )

    def _encode(
        self,
        sample: Any,
        text: str,
        spans: list[tuple[int, int]],
        images: list[Any],
        videos: list[tuple[Any, str]] = (),
        *,
        append_eos: bool = False,
        check_length: bool = True,
        audios: Sequence[DecodedAudio] = (),
    ) -> EncodedSample:
        if not videos:
            limits = self.tile_limits if images and check_length else []
            for limit in limits[:-1]:  # Megatron-LM's rule: fewer tiles until the sample fits
                fitted = self._encode_once(
                    sample,
                    text,
                    spans,
                    images,
                    append_eos=append_eos,
                    check_length=False,
                    max_tiles=limit,
                    audios=audios,
                )
                if fitted.length <= self.seq_length:
                    return fitted
            return self._encode_once(
                sample,
                text,
                spans,
                images,
                append_eos=append_eos,
                check_length=check_length,
                max_tiles=limits[-1] if limits else None,
                audios=audios,
            )
        return encode_fitting_videos(
            sample,
            list(videos),
            self.video,
            has_images=bool(images),
            seq_length=self.seq_length,
            encode=lambda sampled, plan: self._encode_once(
                sample, text, spans, images, sampled, plan, check_length=False, audios=audios
            ),
        )

    def _encode_once(
        self,
        sample: Any,
        text: str,
        spans: list[tuple[int, int]],
        images: list[Any],
        videos: list[SampledVideo] = (),
        plan: VideoPlan | None = None,
        *,
        append_eos: bool = False,
        check_length: bool = True,
        max_tiles: int | None = None,
        audios: Sequence[DecodedAudio] = (),
    ) -> EncodedSample:
        """One processor call, its output as the sample (skipped if too long or unlabelled)."""
        out = self.call_processor(text, images, list(videos), plan, max_tiles, list(audios))
        layout = outputs.output_layout(self.family, out, len(images), len(videos))
        if self.placeholder_offsets is not None:  # the processor reports none (or, as written, empty)
            out["text_replacement_offsets"] = [self.placeholder_offsets(self.processor, text)]
        shift = self.prepended_chars
        spans = [(a + shift, b + shift) for a, b in spans] if shift else spans
        eos = getattr(self.processor.tokenizer, "eos_token_id", None) if append_eos else None
        tokens = outputs.label_tokens(out, spans, layout, self.image_token_id, self.video_token_id, eos)
        ids = tokens.input_ids
        if check_length and len(ids) > self.seq_length:
            raise self._skip(sample, "too_long", f"{len(ids)} tokens > seq_length {self.seq_length}")
        if not tokens.labelled.any():
            raise CountedSkip(
                "no_label_tokens", f"sample {getattr(sample, '__key__', None)!r} has no label tokens"
            )
        label_mask = torch.from_numpy(tokens.labelled)
        labels = torch.where(label_mask, ids, torch.full_like(ids, self.ignore_index))
        visual = outputs.visual_inputs(out, layout)
        self._warn_unused(out, layout)
        grid = out.get(layout.grid) if layout.grid else None
        return EncodedSample.derive_from(
            sample,
            input_ids=ids,
            labels=labels,
            loss_mask=label_mask.to(torch.float32),
            pixel_values=out.get("pixel_values"),
            image_grid_thw=grid if images else None,
            num_images=len(images),
            seq_lengths=[len(ids)],
            visual=visual or None,
            token_fields=tokens.token_fields or None,
            image_token_counts=tokens.image_token_counts,
            num_videos=len(videos),
            video_token_counts=tokens.video_token_counts,
        )

    def _warn_unused(self, out: Any, family: FamilySpec) -> None:
        """Warn once per key about an output the family does not keep."""
        for key in outputs.unused_outputs(out, family):
            if key not in self._warned:
                self._warned.add(key)
                logger.warning(
                    "hf-processor: %s returns %r, which family %r does not keep; it is left out "
                    "of the samples (register a FamilySpec that names it)",
                    type(self.processor).__name__,
                    key,
                    family.name,
                )

    # ------------------------------------------------------------------ combining
    def collate_visual(self, key: str, parts: list[torch.Tensor]) -> torch.Tensor:
        """Combine the samples' ``key`` tensors by the family's rule (concat, padded, one row)."""
        return self.family.combine(key)(parts)


def placeholder_offsets_of(family: FamilySpec) -> PlaceholderOffsets | None:
    """The placeholder expansion ``family`` names (``None`` where it names none).

    Raises:
        ConfigError: the name is not registered.
    """
    name = family.placeholder_offsets
    if name is None:
        return None
    try:
        return PLACEHOLDER_OFFSETS[name]
    except KeyError:
        raise ConfigError(
            f"task_encoder.options.family: family {family.name!r} names placeholder offsets "
            f"{name!r}; known: {', '.join(sorted(PLACEHOLDER_OFFSETS))}"
        ) from None


def build_hf_processor_task_encoder(
    options: HFProcessorOptions, context: BuildContext
) -> HFProcessorTaskEncoder:
    """Factory of the ``hf-processor`` task encoder (``factory(options, context)``)."""
    return HFProcessorTaskEncoder(context, options if options is not None else HFProcessorOptions())
