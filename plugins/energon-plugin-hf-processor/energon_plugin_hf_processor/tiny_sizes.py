"""The sizes every tiny random model shares, written once.

A family's ``model(tokenizer)`` (see :mod:`.tiny_families`, and the tests' built-in models)
builds its text and vision sub-configs from these and passes only what differs: the
``model_type``, the image and patch sizes its processor gives, extra fields. An override of
``None`` leaves the field out, so the config class's own default applies (for a config
without a ``head_dim`` field, say, which derives it from the hidden size).
"""

from __future__ import annotations

from typing import Any

_ONE_LAYER: dict[str, Any] = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
)

TEXT_SIZES: dict[str, Any] = dict(
    _ONE_LAYER, num_key_value_heads=1, head_dim=16, max_position_embeddings=4096
)
"""A one-layer text model of hidden size 32: 2 query heads, 1 key/value head, of 16 each."""

VISION_SIZES: dict[str, Any] = dict(_ONE_LAYER, image_size=28, patch_size=14)
"""A one-layer CLIP/SigLIP-like vision tower of hidden size 32: 28x28 images of 14x14 patches."""


def _merged(sizes: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``sizes`` updated with ``overrides``, less the fields overridden with ``None``."""
    merged = {**sizes, **overrides}
    return {key: value for key, value in merged.items() if key not in overrides or value is not None}


def text_config(tokenizer: Any, **overrides: Any) -> dict[str, Any]:
    """A tiny text sub-config (:data:`TEXT_SIZES`) for ``tokenizer``'s vocabulary and pad token.

    ``overrides`` add or replace fields (``model_type="llama"``, ``num_hidden_layers=2``);
    one given as ``None`` is left out.
    """
    sizes = dict(TEXT_SIZES, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    return _merged(sizes, overrides)


def vision_config(**overrides: Any) -> dict[str, Any]:
    """A tiny vision sub-config (:data:`VISION_SIZES`).

    ``overrides`` add or replace fields (``model_type="siglip_vision_model"``,
    ``image_size=56``); one given as ``None`` is left out.
    """
    return _merged(VISION_SIZES, overrides)
