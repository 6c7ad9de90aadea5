"""Energon samples as the messages a transformers processor's chat template renders.

Every message's content is a list of typed parts (``{"type": "text", "text": ...}``,
``{"type": "image"}``, ``{"type": "video"}``), the shape ``processor.apply_chat_template``
takes; the images and videos travel beside the messages, in the order of their parts.

- ``VQASample``: ``user: [image, question]``, ``assistant: answer`` (the first answer); a
  question holding image tags places the image there instead.
- ``VidQASample``: ``user: [video, question]``, ``assistant: answer``; likewise with a video tag.
- ``CaptioningSample``: ``user: [image, caption_prompt]``, ``assistant: caption``.
- :class:`~energon_plugins.encoding.chatml.ChatMLSample` (crude conversations): its turns,
  image and video tags split into image and video parts.
"""

from __future__ import annotations

from typing import Any

from energon_plugins.encoding.task_encoders.conversation import content_parts

Message = dict[str, Any]


class ImageCountMismatchError(ValueError):
    """A sample's text holds a different number of image (or video) places than it has media."""


def user_turn(text: str, image_tag: str, num_images: int, video_tag: str | None = None,
              num_videos: int = 0) -> list[dict[str, Any]]:
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
    turns: list[tuple[str, Any]], image_tag: str, system_prompt: str | None,
    video_tag: str | None = None,
) -> list[Message]:
    """``(role, content)`` turns as messages of typed parts, a system turn first if asked."""
    messages = [{"role": role, "content": content_parts(content, image_tag, video_tag)}
                for role, content in turns]
    if system_prompt and (not messages or messages[0]["role"] != "system"):
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    return messages


def check_images(messages: list[Message], num_images: int, key: str, num_videos: int = 0) -> None:
    """Raise :class:`ImageCountMismatchError` unless the messages hold ``num_images`` images
    and ``num_videos`` videos."""
    for kind, count in (("image", num_images), ("video", num_videos)):
        places = sum(1 for m in messages for p in m["content"] if p["type"] == kind)
        if places != count:
            raise ImageCountMismatchError(
                f"sample {key!r}: the conversation places {places} {kind}(s) but the sample has "
                f"{count}"
            )


def qa_messages(question: str, answer: str, image_tag: str, num_images: int,
                system_prompt: str | None, video_tag: str | None = None,
                num_videos: int = 0) -> list[Message]:
    """``user: [media, question]``, ``assistant: answer`` (a system turn first if asked)."""
    messages = [
        {"role": "user", "content": user_turn(question, image_tag, num_images, video_tag, num_videos)},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    return messages
