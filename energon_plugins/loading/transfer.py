"""Host-to-device transfer: pinning that the setting controls, and side-stream prefetch.

Energon's loaders construct torch's ``DataLoader`` with ``pin_memory=True`` hard-coded; on a
machine without an accelerator torch then warns and does nothing. :func:`configure_pinning`
sets the loader's flag to what the user asked for (and to ``False`` where nothing can be
pinned), before its first iterator is made. :class:`DevicePrefetcher` copies each batch to a
device on a side CUDA stream, one batch ahead, and records the stream on the tensors so the
caching allocator does not reuse their memory while the compute stream still reads them.
On a machine without CUDA both are quiet no-ops.
"""

import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch


def accelerator_available() -> bool:
    """Whether CUDA is usable here (pinned memory and device streams need it)."""
    return torch.cuda.is_available()


def configure_pinning(loader: Any, pin_memory: bool) -> bool:
    """Make ``loader`` pin batches iff ``pin_memory`` and CUDA is available; return the result.

    Must run before the loader's first iterator is created (torch reads the flag then).
    """
    effective = bool(pin_memory) and accelerator_available()
    if hasattr(loader, "pin_memory"):
        loader.pin_memory = effective
    return effective


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor nested in ``obj`` and return the rebuilt structure.

    Handles dicts, lists, tuples, named tuples, dataclasses (Energon's ``Batch``, slotted or
    frozen ones and megatron-core's ``PackedSeqParams`` included) and objects with their own
    ``map_tensors(fn)`` (a batch format's ``VisualInputs``); anything else is returned
    unchanged. Dataclasses are shallow-copied, so fields outside ``__init__`` survive.
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if callable(getattr(type(obj), "map_tensors", None)):  # e.g. a batch format's VisualInputs
        return obj.map_tensors(fn)
    if isinstance(obj, dict):
        return type(obj)((key, map_tensors(value, fn)) for key, value in obj.items())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        for field in dataclasses.fields(obj):
            object.__setattr__(new, field.name, map_tensors(getattr(obj, field.name), fn))
        return new
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(value, fn) for value in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(value, fn) for value in obj)
    return obj


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Yield every tensor nested in ``obj`` (same traversal as :func:`map_tensors`)."""
    found: list[torch.Tensor] = []

    def collect(tensor: torch.Tensor) -> torch.Tensor:
        found.append(tensor)
        return tensor

    map_tensors(obj, collect)
    return iter(found)


def to_device(obj: Any, device: torch.device | str, *, non_blocking: bool = True) -> Any:
    """Copy every nested tensor to ``device`` (``non_blocking`` pays off from pinned memory)."""
    device = torch.device(device)
    return map_tensors(obj, lambda t: t.to(device, non_blocking=non_blocking))


def pin(obj: Any) -> Any:
    """Pin every nested CPU tensor, or return ``obj`` unchanged without CUDA."""
    if not accelerator_available():
        return obj
    return map_tensors(obj, lambda t: t.pin_memory() if t.device.type == "cpu" else t)


class DevicePrefetcher:
    """Iterate ``source``, yielding batches already on ``device``, one batch ahead.

    With CUDA, batch ``n + 1`` is copied on a side stream while the caller computes on batch
    ``n``. Before a batch is returned, the current stream waits for the copy, and every tensor
    records the current stream, so its memory is not reused while compute still reads it.
    Without CUDA, or for a CPU device, batches pass through unchanged.
    """

    def __init__(self, source: Any, device: torch.device | str | None) -> None:
        self._source = source
        self._iterator: Iterator[Any] | None = None
        self.device = torch.device(device) if device is not None else None
        wants_cuda = self.device is not None and self.device.type == "cuda"
        # Without CUDA a cuda device is a quiet no-op; other devices copy ahead synchronously.
        self.active = self.device is not None and (accelerator_available() or not wants_cuda)
        self._stream = torch.cuda.Stream(device=self.device) if self.active and wants_cuda else None
        self._next: Any = None
        self._exhausted = False

    def _copy_ahead(self) -> None:
        assert self._iterator is not None
        assert self.device is not None, "only an active prefetcher copies ahead"
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._next, self._exhausted = None, True
            return
        if self._stream is None:
            self._next = to_device(batch, self.device, non_blocking=False)
            return
        with torch.cuda.stream(self._stream):
            self._next = to_device(batch, self.device, non_blocking=True)

    def __iter__(self) -> "DevicePrefetcher":
        return self

    def __next__(self) -> Any:
        if self._iterator is None:
            self._iterator = iter(self._source)
            if self.active:
                self._copy_ahead()
        if not self.active:
            return next(self._iterator)
        if self._exhausted:
            raise StopIteration
        batch = self._next
        if self._stream is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self._stream)
            for tensor in iter_tensors(batch):
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)
        self._copy_ahead()
        return batch
