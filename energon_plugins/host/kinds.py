"""The kinds of component and the hook that registers each."""

from collections.abc import Callable
from typing import Any, Literal

Kind = Literal["task_encoder", "image_processor", "packing_strategy", "batch_format", "source_format"]

TASK_ENCODER: Kind = "task_encoder"
IMAGE_PROCESSOR: Kind = "image_processor"
PACKING_STRATEGY: Kind = "packing_strategy"
BATCH_FORMAT: Kind = "batch_format"
SOURCE_FORMAT: Kind = "source_format"

KINDS: tuple[Kind, ...] = (TASK_ENCODER, IMAGE_PROCESSOR, PACKING_STRATEGY, BATCH_FORMAT, SOURCE_FORMAT)

HOOK_FOR_KIND: dict[str, str] = {
    TASK_ENCODER: "register_task_encoders",
    IMAGE_PROCESSOR: "register_image_processors",
    PACKING_STRATEGY: "register_packing_strategies",
    BATCH_FORMAT: "register_batch_formats",
    SOURCE_FORMAT: "register_source_formats",
}


def normalize_kind(kind: str) -> Kind:
    """Return the canonical kind for ``kind``, accepting ``-`` for ``_`` (``task-encoder``).

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`; the message lists them.
    """
    canonical = kind.strip().lower().replace("-", "_")
    if canonical not in KINDS:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of: {', '.join(KINDS)}")
    return canonical


def _is_task_encoder(component: Any) -> bool:
    from megatron.energon import TaskEncoder

    return isinstance(component, TaskEncoder)


def _is_packing_strategy(component: Any) -> bool:
    return callable(getattr(component, "select", None)) or callable(getattr(component, "plan", None))


def _is_source_reader(component: Any) -> bool:
    return callable(getattr(component, "scan", None)) and callable(getattr(component, "load", None))


COMPONENT_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    TASK_ENCODER: ("a megatron.energon TaskEncoder", _is_task_encoder),
    IMAGE_PROCESSOR: ("callable as proc(images=[...], return_tensors='pt')", callable),
    PACKING_STRATEGY: (
        "an object with select(lengths, capacity) or plan(lengths, capacity)",
        _is_packing_strategy,
    ),
    BATCH_FORMAT: ("callable as fmt(batch)", callable),
    SOURCE_FORMAT: ("a reader with scan(source) and load(payload)", _is_source_reader),
}
"""What a factory of each kind must return: ``kind -> (description, check)``. A kind without an
entry accepts any object."""


def component_problem(kind: str, component: Any) -> str | None:
    """Why ``component`` is not a valid ``kind`` component (``None`` when it is)."""
    what, check = COMPONENT_CHECKS.get(kind, ("", None))
    if check is None or check(component):
        return None
    return f"returned {type(component).__name__}, which is not {what}"
