"""``VisualInputs``: the vision inputs of a batch, as Megatron-Bridge's ``vlm_step`` reads them.

Bridge's ``get_batch_from_iterator`` moves the object's tensors to the GPU through its
``__dict__`` (``value.cuda()`` for every entry that is not ``None``), may ``copy`` it and set
``pixel_values`` to ``None`` on middle pipeline stages, and ``forward_step`` passes
``normalized_for_model()`` to the model (keeping the keywords the model's ``forward`` takes).
So every attribute here is a tensor or ``None``, and nothing else lives in ``__dict__``.
"""

from collections.abc import Callable
from typing import Any

import torch

#: Payload tensors whose Qwen-style ``(B, N, C, H, W)`` layout ``normalized_for_model``
#: flattens to ``(B * N, C, H, W)``, as Bridge's ``GenericVisualInputs`` does.
_FIVE_D = ("pixel_values", "pixel_values_videos")
#: Grid tensors whose ``(B, N, 3)`` layout is flattened to ``(B * N, 3)``.
_GRIDS = ("image_grid_thw", "video_grid_thw")


class VisualInputs:
    """Vision inputs by the keyword the model's ``forward`` takes, each a tensor or ``None``.

    Built with keyword arguments (``VisualInputs(pixel_values=..., image_grid_thw=...,
    image_sizes=...)``); read them as attributes. Compatible with Bridge's
    ``GenericVisualInputs``: :meth:`as_model_kwargs`, :meth:`normalized_for_model`, tensors in
    ``__dict__``. :meth:`pin_memory` lets torch's pin-memory pass pin it.

    Raises:
        TypeError: a value is neither a tensor nor ``None`` (the message names the key).
    """

    def __init__(self, **inputs: torch.Tensor | None) -> None:
        for key, value in inputs.items():
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(f"VisualInputs.{key} must be a tensor or None, got {type(value).__name__}")
        self.__dict__.update(inputs)

    def as_model_kwargs(self) -> dict[str, torch.Tensor]:
        """The inputs that are not ``None``, by keyword, unchanged."""
        return {key: value for key, value in self.__dict__.items() if value is not None}

    def normalized_for_model(self) -> dict[str, torch.Tensor]:
        """:meth:`as_model_kwargs` with Qwen-style batched layouts flattened (as Bridge does):
        5-D ``pixel_values`` / ``pixel_values_videos`` to 4-D, 3-D grids to ``(N, 3)``.

        The core's encoders already lay every image out along dim 0, so their tensors pass
        through unchanged.
        """
        kwargs = self.as_model_kwargs()
        for key in _FIVE_D:
            value = kwargs.get(key)
            if value is not None and value.dim() == 5:
                kwargs[key] = value.reshape(-1, *value.shape[2:])
        for key in _GRIDS:
            value = kwargs.get(key)
            if value is not None and value.dim() == 3:
                kwargs[key] = value.reshape(-1, value.shape[-1])
        return kwargs

    def map_tensors(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "VisualInputs":
        """A copy with ``fn`` applied to every tensor (``None`` stays ``None``)."""
        return VisualInputs(
            **{key: None if value is None else fn(value) for key, value in self.__dict__.items()}
        )

    def pin_memory(self) -> "VisualInputs":
        """A copy whose tensors are in pinned (page-locked) memory."""
        return self.map_tensors(lambda tensor: tensor.pin_memory())

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, VisualInputs) or self.__dict__.keys() != other.__dict__.keys():
            return NotImplemented
        return all(
            (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
            for a, b in zip(self.__dict__.values(), other.__dict__.values())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{key}={None if value is None else tuple(value.shape)}" for key, value in self.__dict__.items()
        )
        return f"VisualInputs({parts})"
