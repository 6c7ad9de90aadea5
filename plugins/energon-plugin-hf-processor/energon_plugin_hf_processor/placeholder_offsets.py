"""Placeholder expansions of processors that do not report them (``text_replacement_offsets``).

A processor built on transformers' ``ProcessorMixin.__call__`` reports where it expanded each
image or video placeholder; the encoder moves the answers' character spans through those
expansions. A processor with its own ``__call__`` (Idefics2) reports nothing: a function here
computes the same records from the text it was given, exactly as that processor edits it.
A :class:`~energon_plugin_hf_processor.families.FamilySpec` names one by
``placeholder_offsets``; :func:`register_placeholder_offsets` adds one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

#: ``offsets(processor, text) -> records``: each ``{"type", "span", "new_span", "text",
#: "replacement"}`` (a placeholder's characters in ``text`` and in the text the tokenizer
#: saw, what was there and what replaced it), in text order, as transformers reports them.
PlaceholderOffsets = Callable[[Any, str], list[dict[str, Any]]]


def idefics2_offsets(processor: Any, text: str) -> list[dict[str, Any]]:
    """Idefics2's edits: each ``<image>`` becomes ``<fake><image>*n<fake>`` (five times over
    when it splits images), a doubled ``<fake>`` of adjacent images is kept once, and a space
    follows a closing ``<fake>`` that text follows directly."""
    fake, image = processor.fake_image_token, processor.image_token
    expansion = f"{fake}{image * processor.image_seq_len}{fake}"
    if processor.image_processor.do_image_splitting:
        expansion = (expansion * 5).replace(fake + fake, fake)
    records: list[dict[str, Any]] = []
    cursor = grown = 0
    for match in re.finditer(re.escape(image), text):
        start, end = match.span()
        new = expansion
        if start == cursor and records:  # right after the previous image: one <fake> between
            new = new[len(fake) :]
        new_start = start + grown
        records.append(
            {
                "type": "image",
                "span": (start, end),
                "new_span": (new_start, new_start + len(new)),
                "text": image,
                "replacement": new,
            }
        )
        grown += len(new) - (end - start)
        following = text[end : end + 1]
        if following and not following.isspace() and following != "<":
            space = (end + grown, end + grown + 1)
            records.append(
                {"type": "text", "span": (end, end), "new_span": space, "text": "", "replacement": " "}
            )
            grown += 1
        cursor = end
    return records


def mllama_offsets(processor: Any, text: str) -> list[dict[str, Any]]:
    """Mllama's edits: each ``<|image|>`` stays itself (one token per image), and a text
    without the bos token gets it after its leading image tokens (``build_string_from_input``).
    These are all its edits, so the encoder adds no :func:`~.processor.prepended_chars`."""
    image, bos = processor.image_token, processor.bos_token
    at = 0
    while text.startswith(image, at):
        at += len(image)
    grows = len(bos) if bos and bos not in text else 0
    pending = [
        {"type": "text", "span": (at, at), "new_span": (at, at + grows), "text": "", "replacement": bos}
    ]
    pending = pending if grows else []
    records: list[dict[str, Any]] = []
    for match in re.finditer(re.escape(image), text):
        start, end = match.span()
        shift = grows if start >= at else 0
        if shift and pending:  # the inserted bos comes before this image
            records.append(pending.pop())
        new_span = (start + shift, end + shift)
        records.append(
            {"type": "image", "span": (start, end), "new_span": new_span, "text": image, "replacement": image}
        )
    return records + pending


def written_runs_offsets(processor: Any, text: str) -> list[dict[str, Any]]:
    """A chat template that writes every image's tokens itself (PP-Chart2Table's 256
    ``<imgpad>`` between ``<img>`` and ``</img>``) and a processor that edits nothing: each run
    of the image token is one image, left as written."""
    image = getattr(processor, "image_token", None) or processor.tokenizer.image_token
    return [
        {"type": "image", "span": run.span(), "new_span": run.span(), "text": run[0], "replacement": run[0]}
        for run in re.finditer(f"(?:{re.escape(image)})+", text)
    ]


PLACEHOLDER_OFFSETS: dict[str, PlaceholderOffsets] = {
    "idefics2": idefics2_offsets,
    "mllama": mllama_offsets,
    "written_runs": written_runs_offsets,
}
"""Named placeholder expansions (:attr:`FamilySpec.placeholder_offsets` values)."""


def register_placeholder_offsets(name: str, offsets: PlaceholderOffsets) -> None:
    """Name a placeholder expansion (``offsets(processor, text) -> records``) for family specs."""
    if name in PLACEHOLDER_OFFSETS and PLACEHOLDER_OFFSETS[name] is not offsets:
        raise ValueError(f"placeholder offsets {name!r} are already registered")
    PLACEHOLDER_OFFSETS[name] = offsets
