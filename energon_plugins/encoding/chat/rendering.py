"""Rendering a conversation to text: the chat template, or the plain rendering chosen on purpose.

The tokenizer's chat template renders the messages, unless the sample config's
``conversation_template.chat_template`` names another Jinja template, or ``plain``
(:data:`PLAIN_CHAT_TEMPLATE`): ``{role}: {content}`` lines after the tokenizer's bos token. A
tokenizer without a chat template, where none was chosen, is a :class:`ConfigError` naming
where the tokenizer was loaded from (:func:`missing_chat_template_error`): the silent plain
fallback trained models on a format they never see at inference.
"""

from collections.abc import Sequence
from typing import Any

from energon_plugins.encoding.sample_config import ConversationTemplate
from energon_plugins.errors import ConfigError

Message = dict[str, str]


PLAIN_CHAT_TEMPLATE = "plain"
"""The ``conversation_template.chat_template`` value that chooses the plain rendering on purpose:
``"{role}: {content}\\n"`` per message, after the tokenizer's bos token (see
:func:`render_chat`). Without it, a tokenizer with no chat template is an error."""


def missing_chat_template_error(tokenizer: Any) -> ConfigError:
    """The error for a tokenizer without a chat template when none was chosen, naming where
    the tokenizer was loaded from (``tokenizer.path``) and the ways out."""
    where = getattr(tokenizer, "name_or_path", None)
    named = f"loaded from {str(where)!r}" if where else f"({type(tokenizer).__name__})"
    return ConfigError(
        f"tokenizer.path: the tokenizer {named} has no chat template, so conversations would "
        "be rendered as plain 'user: ...' lines, without the turn markers (and bos token) the "
        "model was trained with; use the model's own tokenizer directory (its "
        "tokenizer_config.json or chat_template.jinja holds the template), set "
        "sample_config.conversation_template.chat_template to the model's Jinja template, or "
        f"choose the plain rendering on purpose with chat_template: {PLAIN_CHAT_TEMPLATE}"
    )


def _has_chat_template(tokenizer: Any, override: str | None) -> bool:
    return bool(override) or bool(getattr(tokenizer, "chat_template", None))


def end_of_turn(tokenizer: Any, template: ConversationTemplate) -> str:
    """What ends an assistant turn in the plain rendering (``chat_template: plain``): the
    template's ``stop_string``, else the tokenizer's ``eos_token``. It is labelled, so the model
    learns to stop.

    Raises:
        ConfigError: neither is set (the model would never learn where an answer ends).
    """
    if template.stop_string:
        return template.stop_string
    eos = getattr(tokenizer, "eos_token", None)
    if isinstance(eos, str) and eos:
        return eos
    raise ConfigError(
        "sample_config.conversation_template.stop_string: the plain rendering is chosen and "
        "the tokenizer has no eos_token, so nothing would end an assistant answer in the "
        "labels; set stop_string (e.g. '</s>'), or a Jinja chat_template"
    )


def uses_plain_rendering(tokenizer: Any, template: ConversationTemplate) -> bool:
    """Whether conversations are rendered without a Jinja chat template: only when
    ``template.chat_template`` is :data:`PLAIN_CHAT_TEMPLATE`.

    Raises:
        ConfigError: no chat template at all (neither ``template.chat_template`` nor the
            tokenizer's) and the plain rendering not chosen; the message names the tokenizer's
            path (:func:`missing_chat_template_error`).
    """
    if template.chat_template == PLAIN_CHAT_TEMPLATE:
        return True
    if _has_chat_template(tokenizer, template.chat_template):
        return False
    raise missing_chat_template_error(tokenizer)


def render_chat(
    tokenizer: Any,
    messages: Sequence[Message],
    template: ConversationTemplate,
    *,
    add_generation_prompt: bool = False,
) -> str:
    """Render ``messages`` to text with the chat template.

    ``template.chat_template`` overrides the tokenizer's. With ``chat_template: plain``
    (:data:`PLAIN_CHAT_TEMPLATE`) the tokenizer's bos token (when it has one) comes first, then
    each message as ``"{role}: {content}\\n"`` (the assistant content followed by
    :func:`end_of_turn`); the generation prompt is ``"{assistant_role}: "``.

    Raises:
        ConfigError: there is no chat template and the plain rendering was not chosen.
    """
    if not uses_plain_rendering(tokenizer, template):
        override = template.chat_template
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if override:
            kwargs["chat_template"] = override
        text = tokenizer.apply_chat_template(list(messages), **kwargs)
        if not isinstance(text, str):
            raise TypeError(f"apply_chat_template returned {type(text).__name__}, expected str")
        return text
    stop = end_of_turn(tokenizer, template)
    bos = getattr(tokenizer, "bos_token", None)
    parts = [bos] if isinstance(bos, str) and bos else []
    for msg in messages:
        content = msg["content"]
        if msg["role"] == template.assistant_role:
            content = content + stop
        parts.append(f"{msg['role']}: {content}\n")
    if add_generation_prompt:
        parts.append(f"{template.assistant_role}: ")
    return "".join(parts)
