"""The kinds of component and the hook that registers each."""

from typing import Literal

Kind = Literal["task_encoder", "image_processor", "packing_strategy", "batch_format"]

TASK_ENCODER: Kind = "task_encoder"
IMAGE_PROCESSOR: Kind = "image_processor"
PACKING_STRATEGY: Kind = "packing_strategy"
BATCH_FORMAT: Kind = "batch_format"

KINDS: tuple[Kind, ...] = (TASK_ENCODER, IMAGE_PROCESSOR, PACKING_STRATEGY, BATCH_FORMAT)

HOOK_FOR_KIND: dict[str, str] = {
    TASK_ENCODER: "register_task_encoders",
    IMAGE_PROCESSOR: "register_image_processors",
    PACKING_STRATEGY: "register_packing_strategies",
    BATCH_FORMAT: "register_batch_formats",
}


def normalize_kind(kind: str) -> Kind:
    """Return the canonical kind for ``kind``, accepting ``-`` for ``_`` (``task-encoder``).

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`; the message lists them.
    """
    canonical = kind.strip().lower().replace("-", "_")
    if canonical not in KINDS:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of: {', '.join(KINDS)}")
    return canonical  # type: ignore[return-value]
