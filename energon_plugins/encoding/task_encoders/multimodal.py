"""The built-in ``multimodal`` task encoder: VQA, captioning, interleaved and conversations.

Each sample becomes chat messages (system prompt, user turn with the image tag, assistant
answer; or the turns of a crude ``chatml`` conversation, what ``energon-plugins convert``
writes), rendered with the tokenizer's chat template; only the answer tokens carry labels.
Every image tag is expanded to as many image tokens as the image processor yields embeddings
for that image. Samples are cut to ``seq_length`` (never inside an image) or dropped, per the
``truncation`` option.

In the loader, when the image processor can tell an image's output size or patch grid from
the image's size alone (``output_size_for`` / ``grid_for``), the encoding stage reads only the
image headers and returns a :class:`~energon_plugins.encoding.samples.PendingImagesSample` with
exact lengths; :meth:`MultimodalTaskEncoder.complete_samples` processes the pixels of a whole
pack (after the packing stage has chosen it) or batch in one processor call, into one tensor.
The shuffle and packing buffers then hold no pixel tensors and fill from cheap work, and no
copy concatenates the samples' pixels. ``encode_sample`` called directly still returns
finished samples.
"""

import inspect
from typing import Any

import numpy as np
import torch
from megatron.energon import CaptioningSample, InterleavedSample, VQASample, stateless
from megatron.energon.errors import FatalSampleError
from megatron.energon.task_encoder.base import get_failure_tolerance

from energon_plugins.encoding.chat.chatml import ChatMLSample, conversation_cookers, text_turns
from energon_plugins.encoding.chat.conversation import (
    build_messages,
    end_of_turn,
    resolve_image_token_ids,
    tokenize_conversation,
    tokenize_texts,
    uses_plain_rendering,
    vqa_answer,
)
from energon_plugins.encoding.chat.megatron_lm_samples import MEGATRON_LM_SAMPLE_TYPES, as_encodable
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
from energon_plugins.encoding.task_encoders.image_tokens import ImageTokensMixin
from energon_plugins.encoding.task_encoders.options import MultimodalOptions
from energon_plugins.errors import ConfigError
from energon_plugins.host.context import BuildContext

SUPPORTED = (VQASample, CaptioningSample, InterleavedSample, ChatMLSample, *MEGATRON_LM_SAMPLE_TYPES)


class UnsupportedSampleError(FatalSampleError):
    """The dataset yields a sample type this encoder cannot encode (a setup error)."""


class MultimodalTaskEncoder(ImageTokensMixin, PluginTaskEncoder[Any]):
    """Encode ``VQASample``, ``CaptioningSample``, ``InterleavedSample``, crude ``chatml`` and
    Megatron-LM's sample types (``OCRSample``, ``MultiChoiceVQASample``,
    ``SimilarityInterleavedSample``, ``TextSample``: see
    :mod:`~energon_plugins.encoding.chat.megatron_lm_samples`).

    The image half (processing, image-token counts, deferral, ``finish_sample``,
    ``truncate``) comes from :class:`ImageTokensMixin`.

    Args:
        context: the build context; needs a tokenizer (knowing the image tag as one token)
            and an image processor.
        options: :class:`MultimodalOptions`.
    """

    supported_sample_types = SUPPORTED
    cookers = conversation_cookers()
    defer_images = True
    """In the loader, leave image pixels to :meth:`complete_samples` when the lengths are known
    from the image sizes. A subclass that overrides ``encode_sample`` gets ``False`` (its code
    may read ``pixel_values``) unless its class body sets it: set ``defer_images = True`` when
    its ``encode_sample`` returns what :meth:`finish_sample` built without touching the pixels."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "encode_sample" in cls.__dict__ and "defer_images" not in cls.__dict__:
            cls.defer_images = False

    def __init__(self, context: BuildContext, options: MultimodalOptions | None = None) -> None:
        options = options if options is not None else MultimodalOptions()
        super().__init__(context, on_error=options.on_error, padding=options.padding)
        self.options = options
        if self.tokenizer is None:
            raise ConfigError("multimodal task encoder: the build context has no tokenizer")
        if self.image_processor is None:
            raise ConfigError(
                "image_processor: the multimodal task encoder needs an image processor, but none "
                "was given; pass image_processor=... to EnergonMultiModalDataModule (a "
                "transformers image processor works), or select a task encoder that brings its "
                "own (such as hf-processor)"
            )
        self.image_text_id, self.image_token_id = resolve_image_token_ids(self.tokenizer, self.sample_config)
        template = self.sample_config.conversation_template
        if uses_plain_rendering(self.tokenizer, template):
            end_of_turn(self.tokenizer, template)  # refused now, not on every sample
        self._deferring = False

    # ------------------------------------------------------------------ the loader's stage
    def build_encode_sample(self, dataset: Any, *, worker_config: Any) -> Any:
        """Energon's encoding stage, running :meth:`encode_sample_deferring` in the loader."""
        if (
            not self.defer_images
            or self._is_overridden(self.preencode_sample)
            or (inspect.isgeneratorfunction(inspect.unwrap(type(self).encode_sample)))
        ):
            return super().build_encode_sample(dataset, worker_config=worker_config)
        from megatron.energon.wrappers import MapDataset

        return MapDataset(
            dataset,
            self.encode_sample_deferring,
            worker_config=worker_config,
            stateless_map_fn=True,
            failure_tolerance=get_failure_tolerance(self.encode_sample, self.__default_failure_tolerance__),
        )

    @stateless
    def encode_sample_deferring(self, sample: Any) -> EncodedSample:
        """:meth:`encode_sample` with image pixels left to :meth:`complete_samples` when the
        lengths are known from the image sizes (the loader's encoding stage)."""
        self._deferring = True
        try:
            return self.encode_sample(sample)
        finally:
            self._deferring = False

    # ------------------------------------------------------------------ dispatch
    @stateless
    def encode_sample(self, sample: Any) -> EncodedSample:
        """Encode one Energon sample (dispatching on its type) to an :class:`EncodedSample`."""
        if isinstance(sample, VQASample):
            return self._encode_chat(sample, sample.context, vqa_answer(sample), [sample.image])
        if isinstance(sample, CaptioningSample):
            return self._encode_chat(sample, self.options.caption_prompt, sample.caption, [sample.image])
        if isinstance(sample, InterleavedSample):
            return self._encode_interleaved(sample)
        if isinstance(sample, ChatMLSample):
            return self._encode_conversation(sample)
        converted = as_encodable(sample, self.options.megatron_lm, self.sample_config.image_token)
        if isinstance(converted, ChatMLSample):
            return self._encode_conversation(converted)
        if converted is not None:
            return self._encode_interleaved(converted)
        raise UnsupportedSampleError(
            f"the multimodal task encoder cannot encode {type(sample).__name__} samples "
            f"(key {getattr(sample, '__key__', None)!r}); it handles "
            f"{', '.join(t.__name__ for t in SUPPORTED)}. Use a task encoder plugin for this "
            "sample type."
        )

    # ------------------------------------------------------------------ sample kinds
    def user_text(self, text: str, num_images: int) -> str:
        """The user turn's text with one image tag per image (where the text has none)."""
        tag = self.sample_config.image_token
        if tag in text or num_images == 0:
            return text
        tags = "\n".join([tag] * num_images)
        if not text:
            return tags
        if self.sample_config.image_following_text:
            return f"{text}\n{tags}"
        return f"{tags}\n{text}"

    def _encode_chat(
        self, sample: Any, question: str, answer: str, images: list[torch.Tensor]
    ) -> EncodedSample:
        messages = build_messages(
            self.sample_config.conversation_template,
            [("user", self.user_text(question, len(images))), ("assistant", answer)],
        )
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        return self.fit_sample(sample, ids, labels, images)

    def _encode_conversation(self, sample: ChatMLSample) -> EncodedSample:
        """Every turn of a cooked conversation; its image tags already mark the images."""
        messages = build_messages(self.sample_config.conversation_template, text_turns(sample))
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        return self.fit_sample(sample, ids, labels, list(sample.images))

    def _encode_interleaved(self, sample: InterleavedSample) -> EncodedSample:
        images: list[torch.Tensor] = []
        texts: list[str] = []
        for item in sample.sequence:
            if isinstance(item, str):
                texts.append(item)
            elif _is_image(item):
                images.append(item)
            else:
                raise TypeError(
                    f"InterleavedSample {sample.__key__!r}: sequence item of type "
                    f"{type(item).__name__} (expected str or an image)"
                )
        pieces = iter(tokenize_texts(self.tokenizer, texts))
        ids: list[int] = []
        labels: list[int] = []
        ignore = self.ignore_index
        for item in sample.sequence:
            if isinstance(item, str):
                piece = next(pieces)
                ids += piece
                labels += piece
            else:
                ids.append(self.image_text_id)
                labels.append(ignore)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
            labels.append(eos)
        return self.fit_sample(sample, ids, labels, images)

    def fit_sample(self, sample: Any, ids: list[int], labels: list[int], images: list[Any]) -> EncodedSample:
        """:meth:`finish_sample`, after lowering the tiles per image until the sample fits
        ``seq_length`` when the image processor degrades tiles (its ``tile_limits()``:
        Megatron-LM's rule); with one tile per image left it is cut or skipped as usual."""
        limits = getattr(self.image_processor, "tile_limits", None)
        limits = limits() if images and callable(limits) else []
        if not limits:
            return self.finish_sample(sample, ids, labels, images)
        text_tokens = len(ids) - len(images)  # one image tag per image
        for limit in limits:
            output = self.image_processor(images=images, return_tensors="pt", max_tiles=limit)
            processed = (output, self.check_image_output(output, len(images)))
            if text_tokens + sum(self.image_token_counts(output, len(images))) <= self.seq_length:
                break
        return self.finish_sample(sample, ids, labels, images, processed=processed)

    # ------------------------------------------------------------------ set-up checks
    #: The image ``preflight_problems`` sends through the image processor (width, height).
    PREFLIGHT_IMAGE_SIZE = (224, 224)

    def preflight_problems(self) -> list[str]:
        """Problems found without data: ``seq_length`` shorter than the shortest sample with
        one image (its image tokens plus the chat template around a one-word question and
        answer). Each message starts with the key it concerns."""
        width, height = self.PREFLIGHT_IMAGE_SIZE
        image = torch.full((3, height, width), 0.5)
        messages = build_messages(
            self.sample_config.conversation_template,
            [("user", self.user_text("?", 1)), ("assistant", "a")],
        )
        ids, _ = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        processed, _ = self.process_images([image])
        [tokens] = self.image_token_counts(processed, 1)
        total = len(ids) - 1 + tokens
        if total <= self.seq_length:
            return []
        return [
            f"seq_length: {self.seq_length} is too small for one image: the image processor "
            f"gives {tokens} image tokens for a {width}x{height} image and the chat template "
            f"with a one-word question and answer {len(ids) - 1} more ({total} in all); every "
            "sample with an image would be cut or skipped"
        ]


def _is_image(item: Any) -> bool:
    """An image in an interleaved sequence: a tensor, an array, a PIL image or encoded bytes."""
    return isinstance(item, (torch.Tensor, np.ndarray, bytes, bytearray, memoryview)) or (
        type(item).__module__.startswith("PIL.")
    )


def build_multimodal_task_encoder(
    options: MultimodalOptions | None, context: BuildContext
) -> MultimodalTaskEncoder:
    """Factory of the built-in ``multimodal`` task encoder (``factory(options, context)``)."""
    return MultimodalTaskEncoder(context, options)
