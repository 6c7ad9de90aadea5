"""The ``llava`` task encoder: LLaVA-1.5 VQA, captioning and multi-turn conversations.

Built on the core's ``multimodal`` encoder (chat rendering, assistant-only labels, image-token
expansion, truncation, error policy, batching and packing from the base class). What LLaVA-1.5
adds:

- the Vicuna v1 format (``SYSTEM USER: <image>\\nQ ASSISTANT: A</s>``) with LLaVA's system
  prompt, rendered by this plugin's chat template (``chat_template: tokenizer`` uses the
  tokenizer's own instead);
- the image tag goes before the question when a prompt has none (``<image>\\nQ``);
- each image tag becomes ``(crop_size / patch_size)^2`` image tokens, read from the image
  processor's settings (576 for 336 px crops with 14 px patches) and checked against its output;
- crude conversations (the ``llava`` format: one image and ``conversations`` JSON; ``chatml``:
  numbered images, what ``energon-plugins convert`` writes) are cooked by the core's
  :func:`~energon_plugins.encoding.chat.chatml.cook_chatml`; cooking errors follow ``on_error`` too;
- a sample whose image tags and images disagree in number fails with
  :class:`ImageTagMismatchError` (counted under that name with ``on_error: skip``).
"""

from typing import Any

import torch
from megatron.energon import CaptioningSample, VQASample, stateless

from energon_plugin_llava.options import LlavaOptions
from energon_plugin_llava.template import LLAVA_15_CHAT_TEMPLATE
from energon_plugins import (
    BuildContext,
    ChatMLSample,
    EncodedSample,
    MultiModalSampleConfig,
    MultimodalTaskEncoder,
    UnsupportedSampleError,
    build_messages,
    conversation_cookers,
    text_turns,
    tokenize_conversation,
    vqa_answer,
)


class ImageTagMismatchError(ValueError):
    """A sample's text holds a different number of image tags than it has images."""


def image_tokens_from_settings(processor: Any, patch_size: int) -> int | None:
    """Image embeddings per image implied by a processor's settings, or None if not fixed.

    ``(H / patch) * (W / patch)`` of the crop (when the processor center-crops) or of a fixed
    ``{height, width}`` resize; ``None`` for processors whose output size varies.
    """
    candidates = []
    if getattr(processor, "do_center_crop", False):
        candidates.append(getattr(processor, "crop_size", None))
    candidates.append(getattr(processor, "size", None))
    for size in candidates:
        height, width = _hw(size)
        if height and width:
            return (height // patch_size) * (width // patch_size)
    return None


def _hw(size: Any) -> tuple[int | None, int | None]:
    if size is None:
        return None, None
    if isinstance(size, dict):
        return size.get("height"), size.get("width")
    return getattr(size, "height", None), getattr(size, "width", None)


def llava_sample_config(
    sample_config: MultiModalSampleConfig | None, options: LlavaOptions
) -> MultiModalSampleConfig:
    """The sample config with LLaVA-1.5's chat template, system prompt and image position set."""
    config = sample_config if sample_config is not None else MultiModalSampleConfig()
    template = config.conversation_template
    changes: dict[str, Any] = {"system_prompt": options.system_prompt or None}
    if options.chat_template == "llava-1.5":
        changes.update(
            chat_template=LLAVA_15_CHAT_TEMPLATE,
            system_role="system",
            user_role="user",
            assistant_role="assistant",
            stop_string=None,
        )
    template = template.model_copy(update=changes)
    return config.model_copy(
        update={
            "conversation_template": template,
            "image_following_text": options.image_position == "after",
        }
    )


class LlavaTaskEncoder(MultimodalTaskEncoder):
    """Encode LLaVA-1.5 samples: ``VQASample``, ``CaptioningSample``, crude ``llava`` and ``chatml``.

    Args:
        context: the build context (tokenizer with the image tag as one token; an image
            processor: the one selected, else the model directory's, which the datamodule
            resolves; without either, ``llava-clip`` with default settings is built).
        options: :class:`~energon_plugin_llava.options.LlavaOptions`.
    """

    defer_images = True
    """``encode_sample`` returns what ``finish_sample`` built: pixels may wait in the loader."""

    cookers = conversation_cookers()
    supported_sample_types = (ChatMLSample, VQASample, CaptioningSample)

    def __init__(self, context: BuildContext, options: LlavaOptions | None = None) -> None:
        options = options if options is not None else LlavaOptions()
        if context.image_processor is None:
            from energon_plugin_llava.image_processor import build_llava_clip

            context = context.replace(image_processor=build_llava_clip(None, context))
        context = context.replace(sample_config=llava_sample_config(context.sample_config, options))
        super().__init__(context, options)
        self.options: LlavaOptions = options
        #: Image tokens per image from the processor's settings (None: read from its output).
        self.tokens_per_image = (
            options.image_tokens
            if options.image_tokens is not None
            else image_tokens_from_settings(self.image_processor, options.patch_size)
        )

    # ------------------------------------------------------------------ cooking
    # ------------------------------------------------------------------ dispatch
    @stateless
    def encode_sample(self, sample: Any) -> EncodedSample:
        """Encode one sample (VQA, captioning or a cooked LLaVA conversation)."""
        if isinstance(sample, ChatMLSample):
            return self._encode_turns(sample, text_turns(sample), list(sample.images))
        if isinstance(sample, VQASample):
            return self._encode_turns(
                sample,
                [("user", self.user_text(sample.context, 1)), ("assistant", vqa_answer(sample))],
                [sample.image],
            )
        if isinstance(sample, CaptioningSample):
            turns = [("user", self.user_text(self.options.caption_prompt, 1)), ("assistant", sample.caption)]
            return self._encode_turns(sample, turns, [sample.image])
        raise UnsupportedSampleError(
            f"the llava task encoder cannot encode {type(sample).__name__} samples (key "
            f"{getattr(sample, '__key__', None)!r}); it handles VQASample, CaptioningSample and "
            "crude 'llava' and 'chatml' conversations (subflavors: {format: llava | chatml})"
        )

    def _encode_turns(
        self, sample: Any, turns: list[tuple[str, str]], images: list[torch.Tensor]
    ) -> EncodedSample:
        tag = self.sample_config.image_token
        tags = sum(text.count(tag) for _, text in turns)
        if tags != len(images):
            raise ImageTagMismatchError(
                f"sample {sample.__key__!r}: the conversation holds {tags} {tag!r} tag(s) but "
                f"the sample has {len(images)} image(s)"
            )
        messages = build_messages(self.sample_config.conversation_template, turns)
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        return self.finish_sample(sample, ids, labels, images)

    # ------------------------------------------------------------------ image tokens
    def image_token_counts(self, processed: Any, num_images: int) -> list[int]:
        """``tokens_per_image`` per image, checked against the processor's output shape."""
        counts = super().image_token_counts(processed, num_images)
        if self.tokens_per_image is not None and self.options.image_tokens is None:
            if any(c != self.tokens_per_image for c in counts):
                raise ValueError(
                    f"the image processor's settings imply {self.tokens_per_image} image tokens "
                    f"per image (patch_size {self.options.patch_size}), but its output gives "
                    f"{counts}"
                )
        return counts


def build_llava_task_encoder(options: LlavaOptions | None, context: BuildContext) -> LlavaTaskEncoder:
    """Factory of the ``llava`` task encoder (``factory(options, context)``)."""
    return LlavaTaskEncoder(context, options)
