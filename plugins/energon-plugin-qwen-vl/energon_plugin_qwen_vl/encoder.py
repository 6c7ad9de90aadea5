"""The ``qwen2-vl`` task encoder: ChatML conversations with dynamic-resolution images.

Built on the core's ``multimodal`` encoder (assistant-only labels through the tokenizer's chat
template, image-token expansion, truncation that never cuts an image, error policy, batching
and packing from the base class). What Qwen2-VL adds:

- every image tag of the data (``sample_config.image_token``, ``<image>``) becomes
  ``<|vision_start|><|image_pad|><|vision_end|>`` in the text, then the ``<|image_pad|>`` is
  repeated ``t * h * w / merge_size^2`` times, from the processor's ``image_grid_thw``;
- ``pixel_values`` are the processor's ``(patches, dim)`` rows and ``image_grid_thw``
  (``(N, 3)``) travels with the sample into the batch (and is stacked when packing);
- crude ``chatml`` samples (one or more images, GPT-style ``conversations``) are cooked by
  the core's :func:`~energon_plugins.encoding.chatml.cook_chatml`; cooking errors follow ``on_error`` too;
- a sample whose image tags and images disagree in number fails with
  :class:`ImageTagMismatchError` (counted under that name with ``on_error: skip``).
"""

from typing import Any

import torch
from megatron.energon import CaptioningSample, VQASample, stateless

from energon_plugins.host.context import BuildContext
from energon_plugins.errors import ConfigError
from energon_plugins.encoding.sample_config import MultiModalSampleConfig
from energon_plugins.encoding.chatml import ChatMLSample, conversation_cookers, text_turns
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.conversation import (
    build_messages,
    tokenize_conversation,
    vqa_answer,
)
from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
from energon_plugins.encoding.task_encoders.multimodal import (
    MultimodalTaskEncoder,
    UnsupportedSampleError,
)

from energon_plugin_qwen_vl.options import Qwen2VLOptions


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
    """Encode Qwen2-VL samples: crude ``chatml`` conversations, ``VQASample``, ``CaptioningSample``.

    Args:
        context: the build context: a tokenizer with Qwen2-VL's vision tokens and an image
            processor that reports ``image_grid_thw`` and ``merge_size`` (else the ``qwen2-vl``
            image processor with default settings is built).
        options: :class:`~energon_plugin_qwen_vl.options.Qwen2VLOptions`.
    """

    defer_images = True
    """``encode_sample`` returns what ``finish_sample`` built: pixels may wait in the loader."""

    cookers = conversation_cookers()
    supported_sample_types = (ChatMLSample, VQASample, CaptioningSample)

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
        self.vision_end_id = _single_token_id(
            self.tokenizer, options.vision_end_token, "vision_end_token"
        )
        self.vision_span = (
            options.vision_start_token + options.image_pad_token + options.vision_end_token
        )

    # ------------------------------------------------------------------ cooking
    # ------------------------------------------------------------------ dispatch
    @stateless
    def encode_sample(self, sample: Any) -> EncodedSample:
        """Encode one sample (a cooked ChatML conversation, VQA or captioning)."""
        if isinstance(sample, ChatMLSample):
            return self._encode_turns(sample, text_turns(sample), list(sample.images))
        if isinstance(sample, VQASample):
            turns = [("user", self._with_tag(sample.context)), ("assistant", vqa_answer(sample))]
            return self._encode_turns(sample, turns, [sample.image])
        if isinstance(sample, CaptioningSample):
            turns = [("user", self._with_tag(self.options.caption_prompt)),
                     ("assistant", sample.caption)]
            return self._encode_turns(sample, turns, [sample.image])
        raise UnsupportedSampleError(
            f"the qwen2-vl task encoder cannot encode {type(sample).__name__} samples (key "
            f"{getattr(sample, '__key__', None)!r}); it handles crude 'chatml' conversations "
            "(subflavors: {format: chatml}), VQASample and CaptioningSample"
        )

    def _with_tag(self, text: str) -> str:
        """Qwen2-VL puts the image before the text of a single-image prompt without a tag."""
        if self.image_tag in text:
            return text
        return self.image_tag + (f"\n{text}" if text else "")

    def _encode_turns(
        self, sample: Any, turns: list[tuple[str, str]], images: list[torch.Tensor]
    ) -> EncodedSample:
        tags = sum(text.count(self.image_tag) for _, text in turns)
        if tags != len(images):
            raise ImageTagMismatchError(
                f"sample {sample.__key__!r}: the conversation holds {tags} {self.image_tag!r} "
                f"tag(s) but the sample has {len(images)} image(s)"
            )
        turns = [(kind, text.replace(self.image_tag, self.vision_span)) for kind, text in turns]
        messages = build_messages(self.sample_config.conversation_template, turns)
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        return self.finish_sample(sample, ids, labels, images)

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


def build_qwen2_vl_task_encoder(
    options: Qwen2VLOptions | None, context: BuildContext
) -> Qwen2VLTaskEncoder:
    """Factory of the ``qwen2-vl`` task encoder (``factory(options, context)``)."""
    return Qwen2VLTaskEncoder(context, options)
