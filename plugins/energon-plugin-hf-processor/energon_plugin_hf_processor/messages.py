"""Energon samples as the messages a transformers processor's chat template renders.

Every message's content is a list of typed parts (``{"type": "text", "text": ...}``,
``{"type": "image"}``, ``{"type": "video"}``), the shape ``processor.apply_chat_template``
takes; the images and videos travel beside the messages, in the order of their parts.

- ``VQASample``: ``user: [image, question]``, ``assistant: answer`` (the first answer); a
  question holding image tags places the image there instead.
- ``VidQASample``: ``user: [video, question]``, ``assistant: answer``; likewise with a video tag.
- ``CaptioningSample``: ``user: [image, caption_prompt]``, ``assistant: caption``.
- :class:`~energon_plugins.encoding.chat.chatml.ChatMLSample` (crude conversations): its turns,
  image, video and audio tags split into image, video and audio parts (the audio clips are
  read by :func:`.audio.labelled_audios`).
- Megatron-LM's ``OCRSample``, ``MultiChoiceVQASample``, ``SimilarityInterleavedSample`` and
  ``TextSample`` reach here already written as a ``ChatMLSample`` or an ``InterleavedSample``
  (``energon_plugins.as_encodable``, in Megatron-LM's prompt formats).

:func:`sample_messages` dispatches on the sample type; :func:`interleaved_text` writes an
``InterleavedSample`` as running text with the template's image placeholder.
"""

from __future__ import annotations

from typing import Any

from megatron.energon import CaptioningSample, InterleavedSample, VidQASample, VQASample

from energon_plugins import (
    CONVERSATION_FORMATS,
    ChatMLSample,
    UnsupportedSampleError,
    content_parts,
    conversation_turns,
    describe_part,
    labelled_videos,
    vqa_answer,
)

Message = dict[str, Any]


class ImageCountMismatchError(ValueError):
    """A sample's text holds a different number of image (or video) places than it has media."""


def user_turn(
    text: str, image_tag: str, num_images: int, video_tag: str | None = None, num_videos: int = 0
) -> list[dict[str, Any]]:
    """A user content with ``num_images`` images and ``num_videos`` videos: at their tags, else
    before the text (videos, then images)."""
    parts = content_parts(text, image_tag, video_tag)
    media = []
    if not any(p["type"] == "video" for p in parts):
        media += [{"type": "video"} for _ in range(num_videos)]
    if not any(p["type"] == "image" for p in parts):
        media += [{"type": "image"} for _ in range(num_images)]
    return media + parts


def conversation_messages(
    turns: list[tuple[str, Any]],
    image_tag: str,
    system_prompt: str | None,
    video_tag: str | None = None,
    audio_tag: str | None = None,
) -> list[Message]:
    """``(role, content)`` turns as messages of typed parts, a system turn first if asked."""
    messages = [
        {"role": role, "content": content_parts(content, image_tag, video_tag, audio_tag)}
        for role, content in turns
    ]
    if system_prompt and (not messages or messages[0]["role"] != "system"):
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    return messages


def check_images(
    messages: list[Message], num_images: int, key: str, num_videos: int = 0, num_audios: int = 0
) -> None:
    """Raise :class:`ImageCountMismatchError` unless the messages hold ``num_images`` images,
    ``num_videos`` videos and ``num_audios`` audio clips."""
    for kind, count in (("image", num_images), ("video", num_videos), ("audio", num_audios)):
        places = sum(1 for m in messages for p in m["content"] if p["type"] == kind)
        if places != count:
            raise ImageCountMismatchError(
                f"sample {key!r}: the conversation places {places} {kind}(s) but the sample has {count}"
            )


def qa_messages(
    question: str,
    answer: str,
    image_tag: str,
    num_images: int,
    system_prompt: str | None,
    video_tag: str | None = None,
    num_videos: int = 0,
) -> list[Message]:
    """``user: [media, question]``, ``assistant: answer`` (a system turn first if asked)."""
    messages = [
        {"role": "user", "content": user_turn(question, image_tag, num_images, video_tag, num_videos)},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    return messages


def sample_messages(
    sample: Any,
    image_tag: str,
    video_tag: str | None,
    system_prompt: str | None,
    caption_prompt: str,
    audio_tag: str | None = None,
) -> tuple[list[Message], list[Any], list[tuple[Any, str]]]:
    """The messages (content as typed parts), images and videos of a conversation-like
    sample; each video as ``(Energon's AVDecoder or bytes, the file it came from)``. With
    ``audio_tag``, a conversation's audio tags become audio parts too.

    Raises:
        UnsupportedSampleError: a sample type the ``hf-processor`` encoder does not handle.
    """
    if isinstance(sample, ChatMLSample):
        turns = conversation_turns(sample)
        messages = conversation_messages(turns, image_tag, system_prompt, video_tag, audio_tag)
        return messages, list(sample.images), labelled_videos(sample)
    if isinstance(sample, VQASample):
        answer = vqa_answer(sample)
        return qa_messages(sample.context, answer, image_tag, 1, system_prompt), [sample.image], []
    if isinstance(sample, VidQASample):
        answer = vqa_answer(sample)
        messages = qa_messages(sample.context, answer, image_tag, 0, system_prompt, video_tag, 1)
        return messages, [], [(sample.video, describe_part(sample, "video"))]
    if isinstance(sample, CaptioningSample):
        messages = qa_messages(caption_prompt, sample.caption, image_tag, 1, system_prompt)
        return messages, [sample.image], []
    raise UnsupportedSampleError(
        f"the hf-processor task encoder cannot encode {type(sample).__name__} samples (key "
        f"{getattr(sample, '__key__', None)!r}); it handles crude conversations (subflavors "
        f"format {', '.join(CONVERSATION_FORMATS)}), VQASample, VidQASample, CaptioningSample, "
        "InterleavedSample, OCRSample, MultiChoiceVQASample, SimilarityInterleavedSample and TextSample"
    )


def interleaved_text(sample: InterleavedSample, image_placeholder: str) -> tuple[str, list[Any]]:
    """The text of an interleaved sample, ``image_placeholder`` at each image, and its images
    in their order."""
    texts: list[str] = []
    images: list[Any] = []
    for item in sample.sequence:
        if isinstance(item, str):
            texts.append(item)
        else:
            texts.append(image_placeholder)
            images.append(item)
    return "".join(texts), images
