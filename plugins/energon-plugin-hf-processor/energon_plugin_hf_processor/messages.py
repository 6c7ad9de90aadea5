"""Energon samples as the messages a transformers processor's chat template renders.

Every message's content is a list of typed parts (``{"type": "text", "text": ...}``,
``{"type": "image"}``), the shape ``processor.apply_chat_template`` takes; the images travel
beside the messages, in the order of their parts.

- ``VQASample``: ``user: [image, question]``, ``assistant: answer`` (the first answer); a
  question holding image tags places the image there instead.
- ``CaptioningSample``: ``user: [image, caption_prompt]``, ``assistant: caption``.
- :class:`~energon_plugin_hf_processor.samples.ConversationSample`: its turns, image tags
  split into image parts.
"""

from __future__ import annotations

from typing import Any

from energon_plugins.encoding.task_encoders.conversation import content_parts

Message = dict[str, Any]


class ImageCountMismatchError(ValueError):
    """A sample's text holds a different number of image places than it has images."""


def user_turn(text: str, image_tag: str, num_images: int) -> list[dict[str, Any]]:
    """A user content with ``num_images`` images: at its tags, else before the text."""
    parts = content_parts(text, image_tag)
    placed = sum(1 for p in parts if p["type"] == "image")
    if placed == 0:
        parts = [{"type": "image"} for _ in range(num_images)] + parts
    return parts


def conversation_messages(
    turns: list[tuple[str, Any]], image_tag: str, system_prompt: str | None
) -> list[Message]:
    """``(role, content)`` turns as messages of typed parts, a system turn first if asked."""
    messages = [{"role": role, "content": content_parts(content, image_tag)} for role, content in turns]
    if system_prompt and (not messages or messages[0]["role"] != "system"):
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    return messages


def check_images(messages: list[Message], num_images: int, key: str) -> None:
    """Raise :class:`ImageCountMismatchError` unless the messages hold ``num_images`` images."""
    places = sum(1 for m in messages for p in m["content"] if p["type"] == "image")
    if places != num_images:
        raise ImageCountMismatchError(
            f"sample {key!r}: the conversation places {places} image(s) but the sample has "
            f"{num_images}"
        )


def qa_messages(question: str, answer: str, image_tag: str, num_images: int,
                system_prompt: str | None) -> list[Message]:
    """``user: [images, question]``, ``assistant: answer`` (a system turn first if asked)."""
    messages = [
        {"role": "user", "content": user_turn(question, image_tag, num_images)},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    return messages
