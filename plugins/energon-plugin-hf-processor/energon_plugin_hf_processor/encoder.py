"""The ``hf-processor`` task encoder: a model's own transformers processor encodes each sample.

For every sample the encoder builds the messages the processor's chat template renders
(:mod:`.messages`), renders them once and finds the assistant answers (:mod:`.labels`), then
calls the processor on the rendered text, the images and the videos, exactly as
``processor.apply_chat_template(messages, tokenize=True, return_dict=True)`` does. So the
token ids (image and video placeholders expanded), the pixel values and every other vision
input are the processor's own. Labels are the token ids inside the answers (end-of-turn token
included), the ignore index elsewhere; images and videos never carry labels.

Videos arrive as Energon's lazy ``AVDecoder``: the encoder reads each video's metadata, picks
the frames the ``video`` options keep, decodes only those (seeking) and hands them to the
processor pre-sampled, with their metadata (frame rate, frame numbers), as transformers'
``do_sample_frames=False`` path takes them. A sample over its visual-token budget (or
``seq_length``) gives up frames, then resolution, before it is skipped (:mod:`.video`).

The processor's outputs become :class:`~energon_plugins.EncodedSample` fields by the
family's :class:`~energon_plugin_hf_processor.families.FamilySpec`, which also says how each
vision input combines when packing and batching (:meth:`collate_visual`). A sample longer
than ``seq_length`` is skipped and counted (``too_long``, never cut inside an image), or fails
under ``on_error: raise``; so is a sample with more than ``max_images`` images.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from megatron.energon import (
    CaptioningSample,
    InterleavedSample,
    SampleDecoder,
    VidQASample,
    VQASample,
    stateless,
)
from megatron.energon.errors import FatalSampleError

from energon_plugins.encoding.chatml import (
    CONVERSATION_FORMATS,
    ChatMLSample,
    conversation_cookers,
    conversation_turns,
)
from energon_plugins.encoding.image_processors.hf import energon_image_to_pil
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.base import CountedSkip, PluginTaskEncoder
from energon_plugins.encoding.task_encoders.conversation import vqa_answer
from energon_plugins.encoding.task_encoders.multimodal import UnsupportedSampleError
from energon_plugins.encoding.video.budget import VideoPlan, budget_skip, misfit
from energon_plugins.encoding.video.decode import (
    SampledVideo,
    as_av_decoder,
    decode_frames,
    describe_part,
    labelled_videos,
    read_video_info,
)
from energon_plugins.encoding.video.sampling import frame_indices
from energon_plugins.errors import ConfigError
from energon_plugins.host.context import BuildContext

from energon_plugin_hf_processor.families import GENERIC, FamilySpec, family_for, generic_layout
from energon_plugin_hf_processor.labels import ChatRenderer, expanded_positions, token_mask
from energon_plugin_hf_processor.messages import (
    check_images,
    conversation_messages,
    qa_messages,
)
from energon_plugin_hf_processor.options import HFProcessorOptions
from energon_plugin_hf_processor.video import ProcessorVideo

logger = logging.getLogger(__name__)

#: Processor outputs that are not model inputs of the sample (or are read separately).
_TEXT_KEYS = ("input_ids", "attention_mask", "offset_mapping", "text_replacement_offsets")


def load_processor(options: HFProcessorOptions, tokenizer: Any = None) -> Any:
    """``AutoProcessor.from_pretrained(options.processor)``, offline.

    Without ``options.processor``, the directory ``tokenizer`` was loaded from (its
    ``name_or_path``: ``tokenizer.path`` of a config file) is used.

    Raises:
        ConfigError: naming ``task_encoder.options.processor`` and why loading failed.
    """
    import pathlib

    from transformers import AutoProcessor

    source = options.processor or getattr(tokenizer, "name_or_path", None)
    if not source:
        raise ConfigError(
            "task_encoder.options.processor: not set, and the tokenizer names no directory; "
            "give the local directory of the model's processor"
        )
    path = pathlib.Path(source).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"task_encoder.options.processor: {str(source)!r} is not a directory (give "
            "the local directory of the model's processor; nothing is downloaded)"
        )
    try:
        processor = AutoProcessor.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=options.trust_remote_code
        )
    except Exception as exc:  # noqa: BLE001 - reported with the option that names it
        hint = "" if options.trust_remote_code else (
            " (a processor outside transformers needs trust_remote_code: true)"
            if "trust_remote_code" in str(exc) else ""
        )
        raise ConfigError(
            f"task_encoder.options.processor: AutoProcessor cannot load {str(path)!r}: "
            f"{type(exc).__name__}: {exc}{hint}"
        ) from exc
    if getattr(processor, "tokenizer", None) is None or not hasattr(processor, "image_processor"):
        raise ConfigError(
            f"task_encoder.options.processor: {str(path)!r} holds a {type(processor).__name__}, "
            "not a vision-language processor (a tokenizer and an image processor)"
        )
    if not getattr(processor.tokenizer, "is_fast", False):
        raise ConfigError(
            f"task_encoder.options.processor: the tokenizer in {str(path)!r} is a slow "
            "tokenizer; hf-processor needs a fast one (tokenizer.json) for token offsets"
        )
    return processor


class HFProcessorTaskEncoder(PluginTaskEncoder[Any]):
    """Encode conversations (with images and videos), VQA (on an image or a video), captioning
    and interleaved samples with a model's processor.

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
    supported_sample_types = (ChatMLSample, VQASample, VidQASample, CaptioningSample,
                              InterleavedSample)
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
                "the processor's tokenizer is used", len(context.tokenizer), len(tokenizer),
            )
        context = context.replace(tokenizer=tokenizer, image_processor=processor.image_processor)
        super().__init__(context, on_error=options.on_error, padding=options.padding)
        self.options = options
        self.processor = processor
        try:
            self.family: FamilySpec = family_for(processor, options.family)
        except ValueError as exc:
            raise ConfigError(f"task_encoder.options.family: {exc}") from exc
        try:
            self.renderer = ChatRenderer(processor, self._end_of_turn_tokens())
        except ValueError as exc:
            raise ConfigError(f"task_encoder.options.processor: {exc}") from exc
        self.image_tag = self.sample_config.image_token
        self.video_tag = self.sample_config.video_token
        self.image_kwargs: dict[str, Any] = {}
        self.call_kwargs = self._call_kwargs()
        #: The processor's video side (frame multiple, pixel cap, call arguments, token counts).
        self.video = ProcessorVideo(processor, self.family, options.video, self.call_kwargs)
        #: The token whose positions hold image embeddings (counted per image).
        self.image_token_id = self._embedding_token_id(self.family.embedding_token)
        #: The token whose positions hold video embeddings (counted per video); ``None``
        #: without a video processor.
        self.video_token_id = (self._embedding_token_id(self.family.video_embedding_token)
                               if self.video.available else None)
        self.image_placeholder = self._image_placeholder()
        self._warned: set[str] = set()
        self._check_with_one_call()

    # ------------------------------------------------------------------ set-up
    def _end_of_turn_tokens(self) -> list[str]:
        """Special tokens that may close a turn: the tokenizer's, less the multimodal ones."""
        tok = self.processor.tokenizer
        multimodal = {
            getattr(self.processor, attr, None)
            for attr in ("image_token", "video_token", "audio_token", "boi_token")
        } | {getattr(tok, attr, None) for attr in ("image_token", "boi_token", "eoi_token")}
        return [t for t in tok.all_special_tokens if t not in multimodal]

    def _call_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.options.processor_kwargs)
        image_processor = self.processor.image_processor
        budget = {"shortest_edge": self.options.min_pixels, "longest_edge": self.options.max_pixels}
        size = getattr(image_processor, "size", None)
        if self.family.pixel_budget and getattr(size, "longest_edge", None) is not None:
            # Qwen-style processors keep the pixel budget as size {shortest,longest}_edge (for
            # the images only: the videos have their own, in the video options).
            if any(v is not None for v in budget.values()):
                self.image_kwargs["size"] = {k: v if v is not None else getattr(size, k)
                                             for k, v in budget.items()}
            return kwargs
        for name in ("min_pixels", "max_pixels"):
            value = getattr(self.options, name)
            if value is None:
                continue
            if not hasattr(image_processor, name):
                raise ConfigError(
                    f"task_encoder.options.{name}: the {type(image_processor).__name__} "
                    f"of {type(self.processor).__name__} has no {name} (dynamic-resolution "
                    "processors such as Qwen2-VL's have); use processor_kwargs for its own size "
                    "settings"
                )
            kwargs[name] = value
        return kwargs

    def _embedding_token_id(self, attr: str) -> int | None:
        owner: Any = self.processor
        if attr.startswith("tokenizer."):
            owner, attr = self.processor.tokenizer, attr.split(".", 1)[1]
        token = getattr(owner, attr, None)
        if token is None:
            return None
        token_id = self.processor.tokenizer.convert_tokens_to_ids(token)
        return int(token_id) if isinstance(token_id, int) else None

    def _image_placeholder(self) -> str:
        """What the chat template writes for one image in running text (for interleaved)."""
        left, right = "\u27e6", "\u27e7"
        image_token = getattr(self.processor, "image_token", None) or self.image_tag
        try:
            text = self.renderer.render([{"role": "user", "content": [
                {"type": "text", "text": left}, {"type": "image"}, {"type": "text", "text": right},
            ]}])
        except Exception:  # noqa: BLE001 - templates that need more turns: the bare token
            return image_token
        start, end = text.find(left), text.find(right)
        between = text[start + 1:end] if 0 <= start < end else ""
        return between if image_token in between else image_token

    def _check_with_one_call(self) -> None:
        """Encode one tiny conversation, so bad settings fail now with the option named."""
        from PIL import Image

        sample = VQASample(
            __key__="hf-processor-set-up-check", __restore_key__=(),
            image=Image.new("RGB", (32, 32), (128, 64, 32)), context="?", answers=["ok"],
        )
        try:
            messages, images, _ = self.sample_messages(sample)
            text, spans = self.renderer.render_conversation(messages)
            #: Tokens of the shortest one-image sample (a 32x32 image, one-word turns).
            self.shortest_sample = self._encode(sample, text, spans, images, check_length=False)
        except Exception as exc:  # noqa: BLE001 - reported with what was being set up
            raise ConfigError(
                f"task_encoder hf-processor: {type(self.processor).__name__} failed on a test "
                f"sample with processor_kwargs {self.call_kwargs}: {type(exc).__name__}: {exc}"
            ) from exc

    def preflight_problems(self) -> list[str]:
        """``seq_length`` shorter than the shortest one-image sample (a 32x32 image with one-
        word turns, built when the encoder was): every sample with an image would be skipped."""
        shortest = self.shortest_sample
        if shortest.length <= self.seq_length:
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
        """Encode one Energon sample (dispatching on its type) to an :class:`EncodedSample`."""
        if isinstance(sample, InterleavedSample):
            return self._encode_interleaved(sample)
        messages, images, videos = self.sample_messages(sample)
        check_images(messages, len(images), str(sample.__key__), len(videos))
        self._check_image_count(sample, len(images))
        text, spans = self.renderer.render_conversation(messages)
        return self._encode(sample, text, spans, images, videos)

    def sample_messages(
        self, sample: Any
    ) -> tuple[list[dict[str, Any]], list[Any], list[tuple[Any, str]]]:
        """The messages (content as typed parts), images and videos of a conversation-like
        sample; each video as ``(Energon's AVDecoder or bytes, the file it came from)``."""
        system = self.options.system_prompt
        image_tag, video_tag = self.image_tag, self.video_tag
        if isinstance(sample, ChatMLSample):
            turns = conversation_turns(sample)
            messages = conversation_messages(turns, image_tag, system, video_tag)
            return messages, list(sample.images), labelled_videos(sample)
        if isinstance(sample, VQASample):
            answer = vqa_answer(sample)
            return qa_messages(sample.context, answer, image_tag, 1, system), [sample.image], []
        if isinstance(sample, VidQASample):
            answer = vqa_answer(sample)
            messages = qa_messages(sample.context, answer, image_tag, 0, system, video_tag, 1)
            return messages, [], [(sample.video, describe_part(sample, "video"))]
        if isinstance(sample, CaptioningSample):
            messages = qa_messages(self.options.caption_prompt, sample.caption, image_tag, 1, system)
            return messages, [sample.image], []
        raise UnsupportedSampleError(
            f"the hf-processor task encoder cannot encode {type(sample).__name__} samples (key "
            f"{getattr(sample, '__key__', None)!r}); it handles crude conversations (subflavors "
            f"format {', '.join(CONVERSATION_FORMATS)}), VQASample, VidQASample, CaptioningSample and "
            "InterleavedSample"
        )

    def _encode_interleaved(self, sample: InterleavedSample) -> EncodedSample:
        """Text and images in their order, every text token labelled, eos appended."""
        texts: list[str] = []
        images: list[Any] = []
        for item in sample.sequence:
            if isinstance(item, str):
                texts.append(item)
            else:
                texts.append(self.image_placeholder)
                images.append(item)
        self._check_image_count(sample, len(images))
        text = "".join(texts)
        return self._encode(sample, text, [(0, len(text))], images, append_eos=True)

    def _check_image_count(self, sample: Any, count: int) -> None:
        limit = self.options.max_images
        if limit is not None and count > limit:
            raise self._skip(sample, "too_many_images", f"{count} images > max_images {limit}")

    def _skip(self, sample: Any, reason: str, what: str) -> CountedSkip:
        """The skip of ``sample``, counted under ``reason``; the base class raises instead under
        ``on_error: raise`` (the sample is lost data, not a chosen policy)."""
        return CountedSkip(reason, f"sample {getattr(sample, '__key__', None)!r}: {what}")

    # ------------------------------------------------------------------ the processor call
    def call_processor(self, text: str, images: list[Any], videos: list[SampledVideo] = (),
                       plan: VideoPlan | None = None) -> Any:
        """The processor on one rendered text, its images and its pre-sampled videos, as
        ``apply_chat_template`` calls it.

        Offsets of every token and of every placeholder expansion come back too. Only the
        image and video processors are asked for tensors (some processors read their shapes);
        the text comes back as lists, converted here as the processor's own last step converts
        (``BatchFeature``): the tokenizer asked for ``"pt"`` walks every token and offset in
        Python first (``flatten``), 10-45% of the call on 600-token samples. The output is the
        same, tensor for tensor.
        """
        from transformers import BatchFeature

        bos = getattr(self.processor.tokenizer, "bos_token", None)
        kwargs = dict(self.call_kwargs)
        if bos is not None and text.startswith(bos):
            kwargs["add_special_tokens"] = False
        pil = [energon_image_to_pil(image) for image in images]
        if pil:
            kwargs["images_kwargs"] = {**self.image_kwargs, "return_tensors": "pt"}
        if videos:
            kwargs["videos_kwargs"] = {**self.video.call_kwargs(videos, plan or VideoPlan(())),
                                       "return_tensors": "pt"}
        out = self.processor(
            text=[text], images=[pil] if pil else None,
            videos=[video.frames for video in videos] if videos else None,
            return_offsets_mapping=True, return_text_replacement_offsets=True, **kwargs,
        )
        skip = getattr(self.processor, "skip_tensor_conversion", None)
        return BatchFeature(dict(out), tensor_type="pt", skip_tensor_conversion=skip)

    def _encode(
        self, sample: Any, text: str, spans: list[tuple[int, int]], images: list[Any],
        videos: list[tuple[Any, str]] = (), *, append_eos: bool = False, check_length: bool = True,
    ) -> EncodedSample:
        if not videos:
            return self._encode_once(sample, text, spans, images, append_eos=append_eos,
                                     check_length=check_length)
        return self._encode_videos(sample, text, spans, images, videos)

    def _encode_videos(
        self, sample: Any, text: str, spans: list[tuple[int, int]], images: list[Any],
        videos: list[tuple[Any, str]],
    ) -> EncodedSample:
        """Sample the videos, then try the budget's plans until one fits (or skip)."""
        key = getattr(sample, "__key__", None)
        if not self.video.available:
            raise ValueError(f"sample {key!r} holds videos, but {type(self.processor).__name__} "
                             "has no video processor")
        if images and not self.family.video_with_images:
            raise ValueError(f"sample {key!r}: the {self.family.name} processor cannot take "
                             "images and videos in one sample")
        options = self.options.video
        if self.family.fixed_video_frames and options.num_frames is None:
            raise FatalSampleError(
                f"task_encoder.options.video.num_frames: {self.family.name} takes the videos of a "
                "batch as one (videos, frames, ...) tensor, so every video needs the same frame "
                "count; set video.num_frames"
            )
        decoders = [(as_av_decoder(value, label), label) for value, label in videos]
        infos = [read_video_info(decoder, label) for decoder, label in decoders]
        if self.family.fixed_video_frames:
            short = [label for (_, label), info in zip(decoders, infos)
                     if info.num_frames < options.num_frames]
            if short:
                raise CountedSkip("video_frames", f"sample {key!r}: video {short[0]} has fewer "
                                  f"than video.num_frames={options.num_frames} frames")
        budget = options.max_visual_tokens
        known: tuple[int, int] | None = None  # (tokens besides the videos', image tokens)
        why = ""
        for plan in self.video.plans(infos):
            predicted = self.video.predicted_tokens(infos, plan)
            if predicted is not None:
                visual = sum(predicted) + (known[1] if known else 0)
                length = sum(predicted) + known[0] if known else None
                why = misfit(visual, length, budget, self.seq_length)
                if why:
                    continue
            sampled = [decode_frames(decoder, info, frame_indices(info.num_frames, n), label)
                       for (decoder, label), info, n in zip(decoders, infos, plan.frames)]
            encoded = self._encode_once(sample, text, spans, images, sampled, plan,
                                        check_length=False)
            video_tokens = sum(encoded.video_token_counts or ())
            image_tokens = sum(encoded.image_token_counts or ())
            known = (encoded.length - video_tokens, image_tokens)
            why = misfit(video_tokens + image_tokens, encoded.length, budget, self.seq_length)
            if not why:
                return encoded
        raise budget_skip(key, why)

    def _encode_once(
        self, sample: Any, text: str, spans: list[tuple[int, int]], images: list[Any],
        videos: list[SampledVideo] = (), plan: VideoPlan | None = None,
        *, append_eos: bool = False, check_length: bool = True,
    ) -> EncodedSample:
        out = self.call_processor(text, images, list(videos), plan)
        ids = out["input_ids"][0].to(torch.long)
        offsets = np.asarray(out["offset_mapping"][0])
        reported = out.get("text_replacement_offsets")  # a (1, 0) tensor when empty (InternVL)
        replacements = list(reported[0]) if reported is not None and len(reported) else []
        shifted = expanded_positions([p for span in spans for p in span], replacements)
        labelled = token_mask(offsets, list(zip(shifted[0::2], shifted[1::2])))
        media = {kind: [token_mask(offsets, [r["new_span"]]) for r in replacements
                        if r["type"] == kind] for kind in ("image", "video")}
        for mask in media["image"] + media["video"]:
            labelled &= ~mask
        ids_np = ids.numpy()

        def count(masks: list[np.ndarray], token_id: int | None) -> list[int]:
            return [int((ids_np[m] == token_id).sum()) if token_id is not None else int(m.sum())
                    for m in masks]

        counts = count(media["image"], self.image_token_id)
        video_counts = count(media["video"], self.video_token_id)
        family = self.family if self.family is not GENERIC else generic_layout(
            out, len(images), len(ids_np), len(videos)
        )
        token_fields = {
            key: torch.as_tensor(out[key][0]).to(torch.long)
            for key in family.token_fields if out.get(key) is not None
        }
        eos = getattr(self.processor.tokenizer, "eos_token_id", None)
        if append_eos and isinstance(eos, int) and (len(ids_np) == 0 or ids_np[-1] != eos):
            ids = torch.cat([ids, torch.tensor([eos])])
            labelled = np.append(labelled, True)
            token_fields = {k: torch.cat([v, v.new_zeros(1)]) for k, v in token_fields.items()}
        if check_length and len(ids) > self.seq_length:
            raise self._skip(sample, "too_long", f"{len(ids)} tokens > seq_length {self.seq_length}")
        if not labelled.any():
            raise CountedSkip("no_label_tokens", f"sample {getattr(sample, '__key__', None)!r} "
                              "has no label tokens")
        label_mask = torch.from_numpy(labelled)
        labels = torch.where(label_mask, ids, torch.full_like(ids, self.ignore_index))
        visual = {key: torch.as_tensor(out[key]) for key in family.visual if out.get(key) is not None}
        self._warn_unused(out, family)
        grid = out.get(family.grid) if family.grid else None
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
            token_fields=token_fields or None,
            image_token_counts=counts,
            num_videos=len(videos),
            video_token_counts=video_counts,
        )

    def _warn_unused(self, out: Any, family: FamilySpec) -> None:
        kept = {"pixel_values", family.grid, *family.visual, *family.token_fields, *family.drop,
                *_TEXT_KEYS}
        for key in out:
            if key not in kept and key not in self._warned:
                self._warned.add(key)
                logger.warning(
                    "hf-processor: %s returns %r, which family %r does not keep; it is left out "
                    "of the samples (register a FamilySpec that names it)",
                    type(self.processor).__name__, key, family.name,
                )

    # ------------------------------------------------------------------ preview
    @property
    def video_processor(self) -> Any:
        """The processor's video processor (``preview`` undoes its normalisation), or ``None``."""
        return self.video.video_processor

    def preview_images(self, batch: Any) -> list[list[torch.Tensor]]:
        """Per row, the ``(C, H, W)`` images ``preview`` draws (for a one-row image layout,
        each image's last sub-image: the whole image)."""
        from energon_plugins.cli.batch_images import row_images

        if self.family.pixel_values != "image_row" or batch.pixel_values is None:
            return row_images(batch, self.image_processor)
        per_image = getattr(self.processor, "image_seq_len", 1) or 1
        subs = [max(1, int(n) // per_image) for n in batch.image_token_counts.tolist()]
        flat, rows, image, offset = batch.pixel_values[0], [], 0, 0
        for count in batch.num_images.tolist():
            drawn = []
            for _ in range(int(count)):
                offset += subs[image]
                drawn.append(flat[offset - 1])
                image += 1
            rows.append(drawn)
        return rows

    # ------------------------------------------------------------------ combining
    def collate_visual(self, key: str, parts: list[torch.Tensor]) -> torch.Tensor:
        """Combine the samples' ``key`` tensors by the family's rule (concat, padded, one row)."""
        return self.family.combine(key)(parts)


def build_hf_processor_task_encoder(
    options: HFProcessorOptions, context: BuildContext
) -> HFProcessorTaskEncoder:
    """Factory of the ``hf-processor`` task encoder (``factory(options, context)``)."""
    return HFProcessorTaskEncoder(context, options if options is not None else HFProcessorOptions())
