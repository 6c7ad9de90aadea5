"""The ``qwen2-vl`` task encoder: ChatML conversations with dynamic-resolution images.

Built on the core's ``multimodal`` encoder (assistant-only labels through the tokenizer's chat
template, image-token expansion, truncation that never cuts an image, error policy, batching
and packing from the base class). What Qwen2-VL adds:

- every image tag of the data (``sample_config.image_token``, ``<image>``) becomes
  ``<|vision_start|><|image_pad|><|vision_end|>`` in the text, then the ``<|image_pad|>`` is
  repeated ``t * h * w / merge_size^2`` times, from the processor's ``image_grid_thw``;
- ``pixel_values`` are the processor's ``(patches, dim)`` rows and ``image_grid_thw``
  (``(N, 3)``) travels with the sample into the batch (and is stacked when packing);
- crude ``chatml`` samples (one or more images and videos, GPT-style ``conversations``) are
  cooked by the core's :func:`~energon_plugins.encoding.chat.chatml.cook_chatml`; cooking errors
  follow ``on_error`` too;
- every video tag (``sample_config.video_token``, ``<video>``) becomes
  ``<|vision_start|><|video_pad|><|vision_end|>``, the ``<|video_pad|>`` repeated per merged
  patch of the video's ``video_grid_thw``; the frames are the ones the ``video`` options keep
  (decoded by seeking), processed by transformers' ``Qwen2VLVideoProcessor``
  (:mod:`~energon_plugin_qwen_vl.video`), and travel as ``visual`` entries
  ``pixel_values_videos`` / ``video_grid_thw``. A sample with videos is never cut: over its
  visual-token budget or ``seq_length`` it gives up frames, then resolution, then is skipped;
- a sample whose image (or video) tags and media disagree in number fails with
  :class:`ImageTagMismatchError` (counted under that name with ``on_error: skip``).
"""

from typing import Any

import torch
from megatron.energon import CaptioningSample, VidQASample, VQASample, stateless

from energon_plugin_qwen_vl.options import Qwen2VLOptions
from energon_plugin_qwen_vl.video import QwenVideo
from energon_plugins import (
    BuildContext,
    ChatMLSample,
    ConfigError,
    EncodedSample,
    MultiModalSampleConfig,
    MultimodalTaskEncoder,
    UnsupportedSampleError,
    as_av_decoder,
    budget_misfit,
    budget_plans,
    budget_skip,
    build_messages,
    conversation_cookers,
    decode_frames,
    describe_part,
    expand_image_tokens,
    frame_indices,
    labelled_videos,
    read_video_info,
    text_turns,
    tokenize_conversation,
    vqa_answer,
)


class ImageTagMismatchError(ValueError):
    """A sample's text holds a different number of image tags than it has images."""


def _single_token_id(tokenizer: Any, token: str, option: str) -> int:
    ids = list(tokenizer(token, add_special_tokens=False)["input_ids"])
    if len(ids) != 1:
        raise ConfigError(
            f"qwen2-vl task encoder: the tokenizer has no single token {token!r} (option "
            f"{option}; it tokenizes to {ids}); use a Qwen2-VL tokenizer or set the option"
        )
    return int(ids[0])


class Qwen2VLTaskEncoder(MultimodalTaskEncoder):
    """Encode Qwen2-VL samples: crude ``chatml`` conversations (images and videos),
    ``VQASample``, ``VidQASample``, ``CaptioningSample``.

    Args:
        context: the build context: a tokenizer with Qwen2-VL's vision tokens and an image
            processor that reports ``image_grid_thw`` and ``merge_size`` (else the ``qwen2-vl``
            image processor with default settings is built).
        options: :class:`~energon_plugin_qwen_vl.options.Qwen2VLOptions`.
    """

    defer_images = True
    """``encode_sample`` returns what ``finish_sample`` built: pixels may wait in the loader."""

    cookers = conversation_cookers()
    supported_sample_types = (ChatMLSample, VQASample, VidQASample, CaptioningSample)

    def __init__(self, context: BuildContext, options: Qwen2VLOptions | None = None) -> None:
        options = options if options is not None else Qwen2VLOptions()
        if context.image_processor is None:
            from energon_plugin_qwen_vl.image_processor import build_qwen2_vl_image_processor

            context = context.replace(image_processor=build_qwen2_vl_image_processor(None, context))
        merge = options.merge_size or getattr(context.image_processor, "merge_size", None)
        if not isinstance(merge, int):
            raise ConfigError(
                f"qwen2-vl task encoder: the image processor "
                f"{type(context.image_processor).__name__} has no merge_size (it must report "
                "image_grid_thw, like Qwen2VLImageProcessor); select "
                "image_processor: {name: qwen2-vl} or set task_encoder.options.merge_size"
            )
        config = context.sample_config if context.sample_config is not None else MultiModalSampleConfig()
        #: The image tag the data holds (``<image>``); replaced by the vision span.
        self.image_tag = config.image_token
        #: The video tag the data holds (``<video>``); replaced by the video span.
        self.video_tag = config.video_token
        template = config.conversation_template
        if options.system_prompt is not None:
            template = template.model_copy(update={"system_prompt": options.system_prompt})
        # Internally the image token is <|image_pad|>: that is what gets expanded.
        internal = config.model_copy(
            update={"image_token": options.image_pad_token, "conversation_template": template}
        )
        super().__init__(context.replace(sample_config=internal), options)  # type: ignore[arg-type]
        self.options: Qwen2VLOptions = options  # type: ignore[assignment]
        self.merge_size = int(merge)
        self.vision_start_id = _single_token_id(
            self.tokenizer, options.vision_start_token, "vision_start_token"
        )
        self.vision_end_id = _single_token_id(self.tokenizer, options.vision_end_token, "vision_end_token")
        self.vision_span = options.vision_start_token + options.image_pad_token + options.vision_end_token
        self.video_span = options.vision_start_token + options.video_pad_token + options.vision_end_token
        #: The ``<|video_pad|>`` id (``preview`` and packing find video tokens by it); ``None``
        #: for a tokenizer without it (a video sample then fails, naming the option).
        try:
            self.video_token_id: int | None = _single_token_id(
                self.tokenizer, options.video_pad_token, "video_pad_token"
            )
        except ConfigError as exc:
            self.video_token_id, self._no_video_token = None, str(exc)
        self.video = QwenVideo(self.image_processor, options.video)
        #: transformers' ``Qwen2VLVideoProcessor`` of the videos.
        self.video_processor = self.video.processor

    # ------------------------------------------------------------------ cooking
    # ------------------------------------------------------------------ dispatch
    @stateless
    def encode_sample(self, sample: Any) -> EncodedSample:
        """Encode one sample (a cooked ChatML conversation, VQA or captioning)."""
        if isinstance(sample, ChatMLSample):
            return self._encode_turns(
                sample, text_turns(sample), list(sample.images), labelled_videos(sample)
            )
        if isinstance(sample, VQASample):
            turns = [("user", self._with_tag(sample.context)), ("assistant", vqa_answer(sample))]
            return self._encode_turns(sample, turns, [sample.image])
        if isinstance(sample, VidQASample):
            turns = [
                ("user", self._with_tag(sample.context, self.video_tag)),
                ("assistant", vqa_answer(sample)),
            ]
            return self._encode_turns(sample, turns, [], [(sample.video, describe_part(sample, "video"))])
        if isinstance(sample, CaptioningSample):
            turns = [("user", self._with_tag(self.options.caption_prompt)), ("assistant", sample.caption)]
            return self._encode_turns(sample, turns, [sample.image])
        raise UnsupportedSampleError(
            f"the qwen2-vl task encoder cannot encode {type(sample).__name__} samples (key "
            f"{getattr(sample, '__key__', None)!r}); it handles crude 'chatml' conversations "
            "(subflavors: {format: chatml}), VQASample, VidQASample and CaptioningSample"
        )

    def _with_tag(self, text: str, tag: str | None = None) -> str:
        """Qwen2-VL puts the image (video) before the text of a single-medium prompt without a tag."""
        tag = tag or self.image_tag
        if tag in text:
            return text
        return tag + (f"\n{text}" if text else "")

    def _encode_turns(
        self,
        sample: Any,
        turns: list[tuple[str, str]],
        images: list[torch.Tensor],
        videos: list[tuple[Any, str]] = (),
    ) -> EncodedSample:
        for tag, media, kind in ((self.image_tag, images, "image"), (self.video_tag, videos, "video")):
            tags = sum(text.count(tag) for _, text in turns)
            if tags != len(media):
                raise ImageTagMismatchError(
                    f"sample {sample.__key__!r}: the conversation holds {tags} {tag!r} "
                    f"tag(s) but the sample has {len(media)} {kind}(s)"
                )
        turns = [
            (kind, text.replace(self.image_tag, self.vision_span).replace(self.video_tag, self.video_span))
            for kind, text in turns
        ]
        messages = build_messages(self.sample_config.conversation_template, turns)
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        if videos:
            return self._finish_with_videos(sample, ids, labels, images, list(videos))
        return self.finish_sample(sample, ids, labels, images)

    def _finish_with_videos(
        self,
        sample: Any,
        ids: list[int],
        labels: list[int],
        images: list[torch.Tensor],
        videos: list[tuple[Any, str]],
    ) -> EncodedSample:
        """Pick the first budget plan that fits (counted without decoding), decode its frames,
        expand the video tokens, and finish as for images."""
        if self.video_token_id is None:
            raise ValueError(f"sample {sample.__key__!r} holds videos: {self._no_video_token}")
        processed = self.process_images(images)
        image_tokens = sum(self.image_token_counts(processed[0], len(images)))
        fixed = len(ids) - len(videos) - len(images) + image_tokens  # all but the video tokens
        decoders = [(as_av_decoder(value, label), label) for value, label in videos]
        infos = [read_video_info(decoder, label) for decoder, label in decoders]
        budget = self.options.video.max_visual_tokens
        why = ""
        for plan in budget_plans(
            infos, self.options.video, self.video.frame_multiple, max_pixels=self.video.max_pixels
        ):
            tokens = sum(self.video.predicted_tokens(infos, plan))
            why = budget_misfit(image_tokens + tokens, fixed + tokens, budget, self.seq_length)
            if not why:
                break
        else:
            raise budget_skip(sample.__key__, why)
        sampled = [
            decode_frames(decoder, info, frame_indices(info.num_frames, n), label)
            for (decoder, label), info, n in zip(decoders, infos, plan.frames)
        ]
        visual = self.video(sampled, plan)
        counts = self.video.token_counts(visual["video_grid_thw"])
        ids, labels, _ = expand_image_tokens(
            ids,
            labels,
            text_id=self.video_token_id,
            model_id=self.video_token_id,
            counts=counts,
            ignore_index=self.ignore_index,
        )
        encoded = self.finish_sample(sample, ids, labels, images, processed=processed)
        encoded.visual = {**(encoded.visual or {}), **visual}
        encoded.num_videos = len(videos)
        encoded.video_token_counts = counts
        return encoded

    # ------------------------------------------------------------------ truncation
    def _drop_open_vision_start(self, ids: Any, labels: Any) -> tuple[Any, Any]:
        """Remove a ``<|vision_start|>`` left at the end when a cut fell before an image."""
        if len(ids) and int(ids[-1]) == self.vision_start_id:
            return ids[:-1], labels[:-1]
        return ids, labels

    def truncate(
        self, sample: Any, ids: list[int], labels: list[int], runs: list[tuple[int, int]]
    ) -> tuple[list[int], list[int], int]:
        """The base's cut (never inside an image), without a dangling ``<|vision_start|>``."""
        ids, labels, kept = super().truncate(sample, ids, labels, runs)
        ids, labels = self._drop_open_vision_start(ids, labels)
        return ids, labels, kept

    def truncate_for_packing(self, sample: EncodedSample, capacity: int) -> EncodedSample:
        """The base's packing cut, without a dangling ``<|vision_start|>``."""
        cut = super().truncate_for_packing(sample, capacity)
        ids, labels = self._drop_open_vision_start(cut.input_ids, cut.labels)
        if len(ids) == len(cut.input_ids):
            return cut
        cut.input_ids, cut.labels, cut.loss_mask = ids, labels, cut.loss_mask[: len(ids)]
        cut.seq_lengths = [len(ids)]
        return cut

    # ------------------------------------------------------------------ image tokens
    def image_token_counts(self, processed: Any, num_images: int) -> list[int]:
        """``t * h * w / merge_size^2`` per image, from the processor's ``image_grid_thw``."""
        if num_images == 0:
            return []
        grid = None if processed is None else processed.get("image_grid_thw")
        if grid is None:
            raise ValueError(
                f"image processor {type(self.image_processor).__name__} returned no "
                "image_grid_thw; qwen2-vl needs a grid processor (image_processor: qwen2-vl)"
            )
        merge2 = self.merge_size * self.merge_size
        counts = []
        for t, h, w in grid.tolist():
            if (t * h * w) % merge2:
                raise ValueError(f"image grid {(t, h, w)} is not divisible by merge_size^2 {merge2}")
            counts.append(int(t * h * w) // merge2)
        if len(counts) != num_images:
            raise ValueError(f"the image processor returned {len(counts)} grids for {num_images} images")
        return counts


def build_qwen2_vl_task_encoder(options: Qwen2VLOptions | None, context: BuildContext) -> Qwen2VLTaskEncoder:
    """Factory of the ``qwen2-vl`` task encoder (``factory(options, context)``)."""
    return Qwen2VLTaskEncoder(context, options)
