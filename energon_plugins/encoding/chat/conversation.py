"""Chat rendering, tokenization with assistant-only labels, and image-token expansion.

The rendering itself (the chat template, or ``chat_template: plain`` chosen on purpose) lives in
:mod:`energon_plugins.encoding.chat.rendering`; its names are re-exported here.

These helpers hold no state and are shared by the built-in ``multimodal`` encoder and by
plugin encoders. Labels are aligned with ``input_ids`` (the model shifts them); every token
outside an assistant answer carries the ignore index.
"""

import re
from collections.abc import Callable, Sequence
from typing import Any

from energon_plugins.encoding.chat.rendering import (  # noqa: F401 - re-exported
    PLAIN_CHAT_TEMPLATE,
    Message,
    end_of_turn,
    missing_chat_template_error,
    render_chat,
    uses_plain_rendering,
)
from energon_plugins.encoding.sample_config import ConversationTemplate, MultiModalSampleConfig
from energon_plugins.errors import ConfigError

GPT_ROLES: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}
"""GPT-style (LLaVA, ShareGPT) ``from`` values -> chat roles."""


def gpt_turns(conversations: Any, key: str) -> list[tuple[str, str]]:
    """GPT-style ``[{"from": ..., "value": ...}, ...]`` turns -> ``(role, content)`` pairs.

    Raises:
        ValueError: a turn's ``from`` is not in :data:`GPT_ROLES` or its ``value`` is not a
            string; the sample key and the index of the turn are named.
    """
    turns = []
    for i, turn in enumerate(conversations):
        speaker = turn.get("from") if isinstance(turn, dict) else None
        if speaker not in GPT_ROLES:
            raise ValueError(
                f"sample {key!r}: conversations[{i}].from is {speaker!r}; expected one of {sorted(GPT_ROLES)}"
            )
        value = turn.get("value")
        if not isinstance(value, str):
            raise ValueError(f"sample {key!r}: conversations[{i}].value is not a string")
        turns.append((GPT_ROLES[speaker], value))
    return turns


def vqa_answer(sample: Any) -> str:
    """The answer a ``VQASample`` trains on: its first answer.

    ``answers`` is a list in Energon's sample type; a field map that maps a plain string there
    gives one answer (not one answer per character).

    Raises:
        ValueError: the sample has no answer, or its answers are not strings; the key is named.
    """
    answers = sample.answers
    if isinstance(answers, str):
        answers = [answers]
    if not answers:
        raise ValueError(f"VQASample {sample.__key__!r} has no answers")
    answer = answers[0]
    if not isinstance(answer, str):
        raise ValueError(
            f"VQASample {sample.__key__!r}: answers[0] is {type(answer).__name__}, expected a string"
        )
    return answer


def chat_turns(conversation: Any, key: str) -> list[tuple[str, Any]]:
    """A conversation's turns as ``(role, content)`` pairs, roles in ``system``/``user``/``assistant``.

    Accepts the shapes datasets store: ChatML / OpenAI ``{"role": ..., "content": ...}`` and
    GPT-style (LLaVA, ShareGPT) ``{"from": ..., "value": ...}`` turns (roles mapped with
    :data:`GPT_ROLES`, so ``human``/``gpt`` work in either shape). A content is a string or a
    list of typed parts (``{"type": "text", "text": ...}``, ``{"type": "image"}``), returned
    as it is.

    Raises:
        ValueError: the conversation is not a non-empty list, a turn has neither shape, its
            role is unknown or its content is neither a string nor a list; the sample key
            and the index of the turn are named.
    """
    if not isinstance(conversation, list) or not conversation:
        raise ValueError(f"sample {key!r}: the conversation is not a non-empty list of turns")
    turns = []
    for i, turn in enumerate(conversation):
        if not isinstance(turn, dict):
            raise ValueError(f"sample {key!r}: conversation[{i}] is not a dict")
        if "role" in turn:
            field, speaker, content = "role", turn.get("role"), turn.get("content")
        elif "from" in turn:
            field, speaker, content = "from", turn.get("from"), turn.get("value")
        else:
            raise ValueError(
                f"sample {key!r}: conversation[{i}] has neither 'role'/'content' nor "
                f"'from'/'value' (keys: {sorted(turn)})"
            )
        if speaker not in GPT_ROLES:
            raise ValueError(
                f"sample {key!r}: conversation[{i}].{field} is {speaker!r}; expected one of "
                f"{sorted(GPT_ROLES)}"
            )
        if not isinstance(content, (str, list)):
            raise ValueError(
                f"sample {key!r}: conversation[{i}] content is {type(content).__name__}, "
                "expected a string or a list of parts"
            )
        turns.append((GPT_ROLES[speaker], content))
    return turns


def content_parts(
    content: Any, image_tag: str, video_tag: str | None = None, audio_tag: str | None = None
) -> list[dict[str, Any]]:
    """A turn's content as typed parts: ``{"type": "text", "text": ...}``, ``{"type": "image"}``,
    ``{"type": "video"}`` and ``{"type": "audio"}``.

    A string is split at every ``image_tag`` (``<image>``) and, when given, ``video_tag``
    (``<video>``) and ``audio_tag`` (``<audio>``); the whitespace that separates a tag from the text next to it is dropped
    (``"<image>\\nQ"`` is an image, then ``"Q"``), so the chat template alone decides how media
    and text are joined. A list of parts is checked and copied (an image or video part keeps
    only its type: the media travel separately).

    Raises:
        ValueError: a part that is neither text (with a string ``text``), image nor video.
    """
    if isinstance(content, str):
        tags = {image_tag: "image"}
        if video_tag:
            tags[video_tag] = "video"
        if audio_tag:
            tags[audio_tag] = "audio"
        pattern = re.compile("|".join(re.escape(t) for t in sorted(tags, key=len, reverse=True)))
        parts: list[dict[str, Any]] = []
        pos = 0
        for match in pattern.finditer(content):
            piece = content[pos : match.start()]
            piece = piece.lstrip() if parts and parts[-1]["type"] != "text" else piece
            if piece.rstrip():
                parts.append({"type": "text", "text": piece.rstrip()})
            parts.append({"type": tags[match.group(0)]})
            pos = match.end()
        tail = content[pos:]
        tail = tail.lstrip() if parts and parts[-1]["type"] != "text" else tail
        if tail:
            parts.append({"type": "text", "text": tail})
        return parts
    kinds: tuple[str, ...] = ("image", "video") if video_tag else ("image",)
    kinds += ("audio",) if audio_tag else ()
    parts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in kinds:
            parts.append({"type": kind})
        elif kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        else:
            expected = " or ".join(f"{{'type': {k!r}}}" for k in kinds)
            raise ValueError(
                f"content part {i} is {part!r}; expected {{'type': 'text', 'text': str}} or {expected}"
            )
    return parts


def build_messages(template: ConversationTemplate, turns: Sequence[tuple[str, str]]) -> list[Message]:
    """Chat messages from ``(kind, text)`` turns, ``kind`` in ``system``/``user``/``assistant``.

    The template's role names are used, and its system prompt is put first unless the turns
    already start with a system turn.
    """
    roles = {
        "system": template.system_role,
        "user": template.user_role,
        "assistant": template.assistant_role,
    }
    messages: list[Message] = []
    if template.system_prompt and (not turns or turns[0][0] != "system"):
        messages.append({"role": template.system_role, "content": template.system_prompt})
    for kind, text in turns:
        if kind not in roles:
            raise ValueError(f"unknown turn kind {kind!r} (system, user or assistant)")
        messages.append({"role": roles[kind], "content": text})
    return messages


def _direct_backend(tokenizer: Any) -> Any:
    """The Rust ``tokenizers.Tokenizer`` behind a fast tokenizer, when calling it directly
    gives what ``tokenizer(text, add_special_tokens=False)`` gives; else ``None``.

    That holds when the backend has no truncation or padding set (transformers turns them off
    for such a call) and splits special tokens exactly as the tokenizer asks. The direct call
    skips transformers' per-call Python work (argument checks, backend state, output
    conversion), about half the cost of tokenizing a short piece.
    """
    if not getattr(tokenizer, "is_fast", False):
        return None
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "encode"):
        return None
    try:
        if backend.truncation is not None or backend.padding is not None:
            return None
        split = bool(getattr(tokenizer, "split_special_tokens", False))
        if split != bool(getattr(backend, "encode_special_tokens", False)):
            return None
    except AttributeError:
        return None
    return backend


def tokenize_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without added special tokens (the template already has them)."""
    backend = _direct_backend(tokenizer)
    if backend is not None:
        return backend.encode(text, add_special_tokens=False).ids
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_texts(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each of ``texts`` (no special tokens added).

    Equal to ``[tokenize_text(tokenizer, t) for t in texts]``; the tokenizer's checks are made
    once. One ``encode`` per text, not one batched call: the Rust batch call hands the texts to
    a thread pool, which costs more than it saves for a few short pieces (measured up to
    3 ms per call on a busy 2-core machine).
    """
    backend = _direct_backend(tokenizer)
    if backend is not None:
        return [backend.encode(text, add_special_tokens=False).ids for text in texts]
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]


def assistant_char_spans(
    render: Callable[[Sequence[Any], bool], str],
    messages: Sequence[Any],
    is_answer: Callable[[Any], bool],
    answer_text: Callable[[Any], str],
    *,
    stop_string: str | None = None,
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character span of every answer in it.

    ``render(messages, add_generation_prompt)`` renders a conversation (any chat template,
    any message shape); ``is_answer(message)`` tells the turns whose text carries labels and
    ``answer_text(message)`` their text.

    Uses the prefix property: rendering the conversation up to an answer with
    ``add_generation_prompt=True`` gives a prefix of the full text; the answer runs from
    there to the end of the rendering that includes it, with whatever closes the turn (an
    end-of-turn token) and without the whitespace written after it. Where a template breaks
    the property (it rewrites earlier turns), each answer's text is located in order in the
    full text, followed by ``stop_string`` when that comes next.

    Raises:
        ValueError: an answer cannot be located in the rendered text.
    """
    full = render(messages, False)
    spans: list[tuple[int, int]] = []
    prefix_ok = True
    last = len(messages) - 1
    for i, msg in enumerate(messages):
        if not is_answer(msg):
            continue
        before = render(messages[:i], True)
        # The rendering up to the last turn is the full text: no second render.
        upto = full if i == last else render(messages[: i + 1], False)
        if not (upto.startswith(before) and full.startswith(upto)):
            prefix_ok = False
            break
        spans.append((len(before), len(upto)))
    if prefix_ok:
        return full, [_rstrip_span(full, a, b) for a, b in spans]
    # Fallback: find each answer's text in order; label it plus a following stop string.
    spans = []
    pos = 0
    for msg in messages:
        if not is_answer(msg):
            continue
        content = answer_text(msg).strip()
        start = full.find(content, pos) if content else -1
        if start < 0:
            raise ValueError(
                "cannot locate an assistant answer in the rendered chat (the chat template "
                "neither keeps the prefix property nor the answer text verbatim)"
            )
        end = start + len(content)
        if stop_string and full.startswith(stop_string, end):
            end += len(stop_string)
        spans.append((start, end))
        pos = end
    return full, spans


def _assistant_spans(
    tokenizer: Any, messages: Sequence[Message], template: ConversationTemplate
) -> tuple[str, list[tuple[int, int]]]:
    """The full rendered text and the character spans of every assistant answer.

    :func:`assistant_char_spans` with the tokenizer's (or the template's) chat template;
    whitespace the template writes after a turn is not part of the answer.
    """
    return assistant_char_spans(
        lambda msgs, gen: render_chat(tokenizer, msgs, template, add_generation_prompt=gen),
        messages,
        lambda msg: msg["role"] == template.assistant_role,
        lambda msg: msg["content"],
        stop_string=template.stop_string,
    )


def _rstrip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Drop whitespace that the template puts after a turn (``"</s>\\n"`` -> ``"</s>"``)."""
    stripped = text[start:end].rstrip()
    return (start, start + len(stripped)) if stripped else (start, end)


def tokenize_conversation(
    tokenizer: Any,
    messages: Sequence[Message],
    sample_config: MultiModalSampleConfig,
) -> tuple[list[int], list[int]]:
    """Tokenize a conversation; only assistant answer tokens keep their id as label.

    Returns ``(input_ids, labels)`` of equal length, labels holding ``ignore_index`` outside
    the assistant answers. The rendered text is tokenized piece by piece, split where each
    answer starts and ends, so the prompt tokens are exactly those the model sees at
    inference (the prompt rendered with ``add_generation_prompt=True``) even where a
    byte-level BPE would merge the answer's first word with the space before it.
    """
    template = sample_config.conversation_template
    ignore = sample_config.ignore_index
    full, spans = _assistant_spans(tokenizer, messages, template)
    # Cut the text at every answer boundary, then tokenize the pieces.
    pieces: list[tuple[str, bool]] = []
    pos = 0
    for a, b in spans:
        if a > pos:
            pieces.append((full[pos:a], False))
        if b > a:
            pieces.append((full[a:b], True))
        pos = b
    if pos < len(full):
        pieces.append((full[pos:], False))
    ids: list[int] = []
    labels: list[int] = []
    for (_, labelled), piece in zip(
        pieces, tokenize_texts(tokenizer, [text for text, _ in pieces]), strict=True
    ):
        ids += piece
        labels += piece if labelled else [ignore] * len(piece)
    return ids, labels


def resolve_image_token_ids(tokenizer: Any, sample_config: MultiModalSampleConfig) -> tuple[int, int]:
    """``(text_id, model_id)``: the id the image tag tokenizes to, and the id to emit.

    ``model_id`` is ``sample_config.image_token_id`` when set, else ``text_id``.

    Raises:
        ConfigError: the tokenizer does not turn the image tag into one token.
    """
    token = sample_config.image_token
    if tokenizer is None:
        raise ConfigError("a tokenizer is required to encode multimodal samples")
    ids = tokenize_text(tokenizer, token)
    known = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    if len(ids) != 1 or known is None or (unk is not None and known == unk) or ids[0] != known:
        raise ConfigError(
            f"sample_config.image_token: the tokenizer has no single token {token!r} (it "
            f"tokenizes to {ids}); add it as a special token, e.g. "
            f"tokenizer.add_special_tokens({{'additional_special_tokens': [{token!r}]}}), or "
            "set sample_config.image_token to the tag the tokenizer knows"
        )
    model_id = sample_config.image_token_id if sample_config.image_token_id is not None else known
    return int(known), int(model_id)


def expand_image_tokens(
    input_ids: Sequence[int],
    labels: Sequence[int],
    *,
    text_id: int,
    model_id: int,
    counts: Sequence[int],
    ignore_index: int,
) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """Replace the i-th image tag (``text_id``) by ``counts[i]`` copies of ``model_id``.

    Returns the new ids, labels (ignore index on image tokens) and the ``(start, end)`` span
    of every image run.

    Raises:
        ValueError: the number of image tags differs from ``len(counts)``.
    """
    ids = list(input_ids)
    labs = list(labels)
    if len(ids) != len(labs):
        raise ValueError(f"input_ids ({len(ids)}) and labels ({len(labs)}) differ in length")
    tags = ids.count(text_id)
    if tags != len(counts):
        raise ValueError(f"the text holds {tags} image tag(s) but the sample has {len(counts)} image(s)")
    # Copy the runs between tags by slices (C) instead of token by token.
    out_ids: list[int] = []
    out_labels: list[int] = []
    runs: list[tuple[int, int]] = []
    prev = 0
    for count in counts:
        pos = ids.index(text_id, prev)
        out_ids += ids[prev:pos]
        out_labels += labs[prev:pos]
        start = len(out_ids)
        out_ids += [model_id] * count
        out_labels += [ignore_index] * count
        runs.append((start, len(out_ids)))
        prev = pos + 1
    out_ids += ids[prev:]
    out_labels += labs[prev:]
    return out_ids, out_labels, runs
