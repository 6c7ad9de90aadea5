"""Rendering a conversation with the processor's chat template, and labels from the spans.

:func:`render_conversation` renders the messages once with the processor's template and
finds each assistant answer's character span: from the template's ``{% generation %}``
markers where it has them, otherwise by the prefix property (the core's
:func:`~energon_plugins.encoding.chat.conversation.assistant_char_spans`). A span
runs through the special token that closes the turn (``<|im_end|>``, ``<end_of_turn>``,
``</s>``...) and never over the whitespace the template writes after it.

:func:`token_mask` turns character spans of the rendered text into a token mask of the
processor's output, through the placeholder expansions the processor reports
(``text_replacement_offsets``) and the tokenizer's offsets, as transformers'
``return_assistant_tokens_mask`` does.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_plugins import assistant_char_spans

_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def chat_template_of(processor: Any) -> str:
    """The processor's chat template (its ``default`` one when it has several).

    Raises:
        ValueError: the processor has no chat template.
    """
    template = getattr(processor, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    if not template:
        template = getattr(getattr(processor, "tokenizer", None), "chat_template", None)
    if not isinstance(template, str) or not template:
        raise ValueError(
            f"{type(processor).__name__} has no chat template (chat_template.jinja or "
            "chat_template.json in the processor directory)"
        )
    return template


def has_generation_markers(template: str) -> bool:
    """Whether ``template`` marks the assistant's text with ``{% generation %}``."""
    return bool(_GENERATION.search(template))


def answer_text(message: dict[str, Any]) -> str:
    """The text of a message whose content is a list of typed parts."""
    return "".join(p["text"] for p in message["content"] if p.get("type") == "text")


class ChatRenderer:
    """Renders conversations with one processor's chat template, as ``apply_chat_template``.

    Args:
        processor: the transformers processor.
        end_of_turn: special tokens that may close an assistant turn (extending its span).
        text_roles: the roles whose content the template takes as a string (the text of
            its parts; :attr:`.FamilySpec.template_text_roles`).
        system_as_text: hand the template a system message's content as a string (as
            ``"system"`` in ``text_roles``).
    """

    def __init__(
        self,
        processor: Any,
        end_of_turn: Sequence[str],
        *,
        text_roles: Sequence[str] = (),
        system_as_text: bool = False,
    ) -> None:
        from transformers.utils.chat_template_utils import render_jinja_template

        self._render_jinja = render_jinja_template
        self.template = chat_template_of(processor)
        self.markers = has_generation_markers(self.template)
        # What apply_chat_template hands the template besides the messages.
        self.template_kwargs = dict(processor.tokenizer.special_tokens_map)
        self.end_of_turn = sorted((t for t in end_of_turn if t), key=len, reverse=True)
        #: The roles whose content reaches the template as a string.
        self.text_roles = frozenset(text_roles) | ({"system"} if system_as_text else set())
        # transformers' cached compiler (a function: the encoder pickles for loader workers,
        # a compiled template does not) and the template's other inputs as plain data, once.
        self._compile, self._plain_kwargs = _template_compiler(self.template_kwargs)

    def _template_messages(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as the template takes them (the content of a :attr:`text_roles`
        message as a string)."""
        if not self.text_roles:
            return list(messages)
        out = []
        for message in messages:
            if message["role"] in self.text_roles and not isinstance(message["content"], str):
                media = [p.get("type") for p in message["content"] if p.get("type") != "text"]
                if media:  # the template would write none of them: the processor's count breaks
                    raise ValueError(
                        f"the {message['role']} turn holds a {media[0]!r} part, and this family's "
                        f"chat template takes {message['role']} content as text only"
                    )
                message = {**message, "content": answer_text(message)}
            out.append(message)
        return out

    def render(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = False) -> str:
        """The text ``processor.apply_chat_template(messages, tokenize=False)`` gives.

        Messages of plain roles and text parts (what the encoder builds) go straight to the
        compiled template, with the template's other inputs converted once: transformers'
        ``render_jinja_template`` would copy them into plain data on every call (the template
        renders in an immutable sandbox, so the messages themselves are never changed), about
        half of a short conversation's render. Anything else is rendered by transformers.
        """
        chat = self._template_messages(messages)
        if self._compile is not None and all(_plain_message(message) for message in chat):
            return self._compile(self.template).render(
                messages=chat,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self._plain_kwargs,
            )
        rendered, _ = self._render_jinja(
            conversations=[chat],
            chat_template=self.template,
            add_generation_prompt=add_generation_prompt,
            **self.template_kwargs,
        )
        return rendered[0]

    def render_conversation(self, messages: Sequence[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text and the character span of every assistant answer in it."""
        if self.markers:
            rendered, indices = self._render_jinja(
                conversations=[self._template_messages(messages)],
                chat_template=self.template,
                return_assistant_tokens_mask=True,
                **self.template_kwargs,
            )
            text = rendered[0]
            spans = [_strip(text, a, b) for a, b in indices[0]]
            if not spans and any(m["role"] == "assistant" for m in messages):
                raise ValueError("the chat template's generation markers enclose no answer")
        else:
            text, spans = assistant_char_spans(
                self.render,
                messages,
                lambda m: m["role"] == "assistant",
                answer_text,
            )
        return text, [self._through_end_of_turn(text, a, b) for a, b in spans]

    def _through_end_of_turn(self, text: str, start: int, end: int) -> tuple[int, int]:
        """Extend a span over the special token that directly follows it, if any."""
        for token in self.end_of_turn:
            if text.startswith(token, end):
                return start, end + len(token)
        return start, end


def _template_compiler(template_kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """transformers' template compiler (sandboxed, cached by the template's text) and
    ``template_kwargs`` as the plain data ``render_jinja_template`` hands the template;
    ``(None, {})`` where this transformers has not those helpers (every render then goes
    through ``render_jinja_template``)."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template, _plain_template_data
    except ImportError:  # pragma: no cover - another transformers layout
        return None, {}
    return _compile_jinja_template, _plain_template_data(template_kwargs)


def _plain_message(message: Any) -> bool:
    """Whether ``message`` is a dict of a string role and a string content or a list of parts
    with string values only: the data ``render_jinja_template`` would hand the template as it
    is (no reasoning fields to alias, nothing to convert)."""
    if (
        type(message) is not dict
        or message.keys() - {"role", "content"}
        or type(message.get("role")) is not str
    ):
        return False
    content = message.get("content")
    if type(content) is str:
        return True
    return type(content) is list and all(
        type(part) is dict and all(type(key) is str and type(value) is str for key, value in part.items())
        for part in content
    )


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    """Drop the whitespace at both ends of a span (never making it empty)."""
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    trail = len(piece) - len(piece.rstrip())
    if lead + trail >= len(piece):
        return start, end
    return start + lead, end - trail


def expanded_positions(positions: Sequence[int], replacements: Sequence[dict]) -> list[int]:
    """Character positions of the rendered text, moved to the text after placeholder expansion.

    ``replacements`` are the processor's ``text_replacement_offsets`` of one text (each with
    the placeholder's ``span`` and its expansion's ``new_span``).
    """
    ends = [r["span"][1] for r in replacements]
    gained = [0]
    for r in replacements:
        gained.append(r["new_span"][1] - r["span"][1])
    return [p + gained[bisect.bisect_right(ends, p)] for p in positions]


def token_mask(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """``(L,)`` bool: tokens whose characters overlap any of ``spans`` (``(L, 2)`` offsets).

    Zero-width tokens (added specials without text) match nothing, as in transformers.
    """
    start, end = offsets[:, 0], offsets[:, 1]
    mask = np.zeros(len(offsets), dtype=bool)
    real = end > start
    for a, b in spans:
        mask |= real & (start < b) & (end > a)
    return mask
