"""A ready :class:`~energon_plugins.BuildContext` for tests: demo tokenizer, default processor."""

from typing import Any

from energon_plugins.host.context import BuildContext

#: Defaults of :func:`default_context` (overridable field by field).
DEFAULT_SEQ_LENGTH = 512
DEFAULT_MICRO_BATCH_SIZE = 2

_UNSET: Any = object()


def default_context(
    *,
    tokenizer_family: str = "generic",
    tokenizer: Any = _UNSET,
    image_processor: Any = _UNSET,
    **fields: Any,
) -> BuildContext:
    """A :class:`BuildContext` for tests, every field overridable.

    Args:
        tokenizer_family: the offline demo tokenizer to build (``generic``, ``llava``,
            ``qwen2``) when ``tokenizer`` is not given.
        tokenizer: a tokenizer to use instead (``None`` for none).
        image_processor: an image processor to use instead (``None`` for none); by default the
            built-in ``hf`` processor (transformers ``CLIPImageProcessor`` with its default
            settings: 224 px), created through the registry in use.
        **fields: any other :class:`BuildContext` field (``seq_length`` defaults to 512,
            ``micro_batch_size`` to 2).
    """
    if tokenizer is _UNSET:
        from energon_plugins.synthetic import build_demo_tokenizer

        tokenizer = build_demo_tokenizer(tokenizer_family)
    if image_processor is _UNSET:
        from energon_plugins.host import api

        image_processor = api.create("image_processor", "hf")
    fields.setdefault("seq_length", DEFAULT_SEQ_LENGTH)
    fields.setdefault("micro_batch_size", DEFAULT_MICRO_BATCH_SIZE)
    unknown = set(fields) - set(BuildContext.__dataclass_fields__)
    if unknown:
        raise TypeError(
            f"default_context: unknown BuildContext field(s) {sorted(unknown)}; known: "
            f"{sorted(BuildContext.__dataclass_fields__)}"
        )
    return BuildContext(tokenizer=tokenizer, image_processor=image_processor, **fields)
