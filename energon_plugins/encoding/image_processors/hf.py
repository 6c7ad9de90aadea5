"""The built-in ``hf`` image processor: any transformers image processor.

The processor is wrapped in :class:`HFImageProcessor`, which declares ``image_input =
"bytes"``: Energon leaves images encoded (the shuffle and packing buffers hold the compressed
files), and the wrapper decodes each one to what the transformers class takes best: an RGB
``uint8`` tensor for the torchvision backend (transformers' default; JPEGs decoded by
torchvision), a PIL image for the PIL backend. The result equals calling the processor on the
original image as Energon's ``pil`` decode gives it. Images in other forms (Energon's float
tensors from a dataset decoded elsewhere, PIL images, arrays) are converted to 8-bit first, so
transformers never rescales a float image twice.

The wrapper also tells a task encoder, before any pixel is processed, the output size or
patch grid of an image of a given size (:meth:`HFImageProcessor.output_size_for`,
:meth:`HFImageProcessor.grid_for`), for the transformers classes in :data:`SIZE_PLANNERS` and
:data:`GRID_PLANNERS`; packing uses it to know sample lengths from cheap work. For a
processor that tiles (:data:`TILE_LIMITS`), option ``degrade_tiles`` lets the task encoder
process a sample that does not fit ``seq_length`` again with fewer tiles per image
(:meth:`HFImageProcessor.tile_limits`).
transformers is imported only when a processor is built.
"""

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from energon_plugins.encoding.image_processors.options import HFImageProcessorOptions
from energon_plugins.errors import ConfigError, PluginLoadError

DEFAULT_CLASS = "CLIPImageProcessor"


def energon_image_to_pil(image: Any) -> Any:
    """Convert an Energon image (CHW float tensor in [0, 1], or uint8) to a PIL RGB image.

    PIL images and numpy arrays pass through unchanged.
    """
    import numpy as np
    import torch

    if not isinstance(image, torch.Tensor):
        return image
    from PIL import Image

    t = image.detach().cpu()
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() != 3:
        raise ValueError(f"expected a (C, H, W) image tensor, got shape {tuple(t.shape)}")
    # numpy, not torch: per-image torch ops pay the intra-op thread pool's latency.
    chw = t.numpy()
    if t.dtype.is_floating_point:
        # One float buffer in HWC order, scaled, clipped and rounded in place, then one cast:
        # two passes over the image instead of five temporary copies.
        channels, height, width = chw.shape
        hwc = np.empty((height, width, channels), dtype=chw.dtype)
        np.multiply(chw.transpose(1, 2, 0), 255.0, out=hwc)
        np.clip(hwc, 0.0, 255.0, out=hwc)
        np.rint(hwc, out=hwc)
        array = hwc.astype(np.uint8)
    else:
        array = np.ascontiguousarray(chw.transpose(1, 2, 0)).astype(np.uint8, copy=False)
    channels = chw.shape[0]
    if channels == 1:
        return Image.fromarray(array[:, :, 0]).convert("RGB")
    if channels == 3:
        return Image.fromarray(array)
    if channels == 4:
        return Image.fromarray(array).convert("RGB")
    raise ValueError(f"expected 1, 3 or 4 channels, got {channels}")


def torchvision_backend(processor: Any) -> bool:
    """Whether a transformers image processor works on torch tensors (torchvision backend)."""
    backend = getattr(processor, "backend", None)
    if isinstance(backend, str):
        return backend == "torchvision"
    return type(processor).__name__.endswith("ImageProcessorFast")


def _fixed_output_size(processor: Any, height: int, width: int) -> tuple[int, int] | None:
    """The crop size, or a fixed ``{height, width}`` resize; None when the size varies."""

    def hw(size: Any) -> tuple[int, int] | None:
        if size is None:
            return None
        get = size.get if isinstance(size, dict) else lambda key: getattr(size, key, None)
        h, w = get("height"), get("width")
        return (int(h), int(w)) if h and w else None

    if getattr(processor, "do_center_crop", False):
        crop = hw(getattr(processor, "crop_size", None))
        if crop:
            return crop
    if getattr(processor, "do_resize", True):
        return hw(getattr(processor, "size", None))
    return None


def _smart_resize_of(processor: Any) -> Callable[..., tuple[int, int]]:
    """transformers' ``smart_resize`` of ``processor``'s module (Qwen2-VL's when it has none)."""
    import importlib

    module = importlib.import_module(type(processor).__module__)
    found = getattr(module, "smart_resize", None)
    if found is not None:
        return found
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    return smart_resize


def _qwen2_vl_grid(processor: Any, height: int, width: int) -> tuple[int, int, int]:
    """Qwen2-VL's ``(1, h, w)`` patch grid: transformers' own ``smart_resize``, then patches."""
    smart_resize = _smart_resize_of(processor)
    patch, merge = int(processor.patch_size), int(processor.merge_size)
    size = getattr(processor, "size", None) or {}
    get = size.get if isinstance(size, dict) else lambda key: getattr(size, key, None)
    min_pixels = get("shortest_edge") or getattr(processor, "min_pixels", None)
    max_pixels = get("longest_edge") or getattr(processor, "max_pixels", None)
    rh, rw = smart_resize(height, width, factor=patch * merge, min_pixels=min_pixels, max_pixels=max_pixels)
    return 1, rh // patch, rw // patch


SIZE_PLANNERS: dict[str, Any] = {
    name: _fixed_output_size
    for base in ("CLIPImageProcessor", "SiglipImageProcessor")
    for name in (base, base + "Pil", base + "Fast")
}
"""transformers class name -> ``fn(processor, height, width) -> (H, W) | None``: the pixel
size each image comes out at. Extend it for another class whose output size is known."""

GRID_PLANNERS: dict[str, Any] = {
    name: _qwen2_vl_grid
    for name in ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorPil", "Qwen2VLImageProcessorFast")
}
"""transformers class name -> ``fn(processor, height, width) -> (t, h, w)``: the patch grid
(``image_grid_thw`` row) of an image of that size. Qwen2.5-VL and Qwen3-VL use the Qwen2-VL
class with their own settings."""


TILE_LIMITS: dict[str, str] = {
    name: "max_patches"
    for name in ("GotOcr2ImageProcessor", "GotOcr2ImageProcessorPil", "GotOcr2ImageProcessorFast")
}
"""transformers class name -> the call keyword of its maximum tiles per image (InternVL's
processor, with ``crop_to_patches``). Extend it for another class that tiles."""


def _planner(table: dict[str, Any], processor: Any) -> Any:
    for cls in type(processor).__mro__:
        if cls.__name__ in table:
            return table[cls.__name__]
    return None


class HFImageProcessor:
    """A transformers image processor that takes the encoded images Energon hands over.

    Call it like the wrapped processor: ``proc(images=[...], return_tensors="pt")``; images
    may be encoded files (bytes), PIL images, arrays, uint8 or float tensors. Attribute access
    (``size``, ``merge_size``, ``patch_size``, ...) falls through to it.
    """

    accepts_energon_images = True
    image_input = "bytes"
    """Energon leaves images encoded; the wrapper decodes them for the wrapped class."""

    def __init__(self, processor: Any, tile_degradation: dict[int, int] | None = None) -> None:
        """Wrap ``processor`` (a transformers image processor instance); ``tile_degradation``:
        the steps down in maximum tiles per image (option ``degrade_tiles``), or None."""
        self.processor = processor
        self.decodes_to = "uint8" if torchvision_backend(processor) else "pil"
        """What images are handed to the wrapped class: ``uint8`` tensors or ``pil`` images."""
        self.tile_degradation = tile_degradation
        """Maximum tiles per image -> the next maximum to try; None when not degrading."""

    @property
    def max_tiles(self) -> int | None:
        """The processor's own maximum tiles per image when it tiles (:data:`TILE_LIMITS` and
        ``crop_to_patches``), else None."""
        keyword = _planner(TILE_LIMITS, self.processor)
        if keyword is None or not getattr(self.processor, "crop_to_patches", False):
            return None
        return int(getattr(self.processor, keyword))

    def tile_limits(self) -> list[int]:
        """The maxima of tiles per image to try in turn on a sample that does not fit: the
        processor's own, then each step of :attr:`tile_degradation` down to 1. Empty when the
        processor does not tile or degradation is off."""
        limit = self.max_tiles
        if limit is None or self.tile_degradation is None:
            return []
        limits = [limit]
        while limits[-1] > 1 and limits[-1] in self.tile_degradation:
            limits.append(self.tile_degradation[limits[-1]])
        return limits

    def __call__(self, images: Any = None, *args: Any, max_tiles: int | None = None, **kwargs: Any) -> Any:
        """The wrapped processor on ``images``; ``max_tiles`` lowers the maximum tiles per
        image of a processor that tiles (for this call only)."""
        from energon_plugins.encoding.image_processors.inputs import to_pil, to_uint8_chw

        if max_tiles is not None:
            kwargs[_planner(TILE_LIMITS, self.processor)] = max_tiles

        convert = to_uint8_chw if self.decodes_to == "uint8" else to_pil
        if isinstance(images, (list, tuple)):
            images = [convert(img, index=i) for i, img in enumerate(images)]
        elif images is not None:
            images = convert(images)
        return self.processor(images=images, *args, **kwargs)

    def output_size_for(self, height: int, width: int) -> tuple[int, int] | None:
        """``(H, W)`` of the pixels an image of this size comes out at, when known in advance."""
        planner = _planner(SIZE_PLANNERS, self.processor)
        return planner(self.processor, height, width) if planner is not None else None

    def grid_for(self, height: int, width: int) -> tuple[int, int, int] | None:
        """The ``image_grid_thw`` row of an image of this size, when known in advance."""
        planner = _planner(GRID_PLANNERS, self.processor)
        return planner(self.processor, height, width) if planner is not None else None

    def __getattr__(self, name: str) -> Any:
        if name == "processor":  # not yet set (e.g. during unpickling)
            raise AttributeError(name)
        return getattr(self.processor, name)

    def __repr__(self) -> str:
        return f"HFImageProcessor({type(self.processor).__name__})"


def wrap_image_processor(processor: Any) -> Any:
    """Wrap a raw transformers image processor in :class:`HFImageProcessor`.

    Anything else (``None``, an already wrapped processor, a plugin's own processor) is
    returned unchanged.
    """
    if processor is None or getattr(processor, "accepts_energon_images", False):
        return processor
    module = type(processor).__module__ or ""
    # "transformers.models..." or, for trust_remote_code classes, "transformers_modules..."
    if module.split(".")[0] in ("transformers", "transformers_modules"):
        return HFImageProcessor(processor)
    return processor


def _is_image_processor_class(cls: Any, transformers: Any) -> TypeGuard[type[Any]]:
    """Whether ``cls`` is an image processor class of ``transformers``."""
    base = getattr(transformers, "BaseImageProcessor", None)
    if not isinstance(cls, type):
        return False
    if base is not None and issubclass(cls, base):
        return True
    return cls.__name__.endswith(("ImageProcessor", "ImageProcessorFast", "ImageProcessorPil"))


def _image_processor_class_names(transformers: Any) -> list[str]:
    return sorted(
        name
        for name in dir(transformers)
        if name.endswith(("ImageProcessor", "ImageProcessorFast", "ImageProcessorPil"))
    )


def _accepted_kwargs(cls: type[Any]) -> set[str] | None:
    """Keyword arguments ``cls`` documents (its ``valid_kwargs`` TypedDict or signature)."""
    import inspect
    import typing

    valid = getattr(cls, "valid_kwargs", None)
    if valid is not None:
        try:
            return set(typing.get_type_hints(valid))
        except Exception:  # noqa: BLE001 - unresolvable annotations: read the raw names
            return {key for base in valid.__mro__ for key in getattr(base, "__annotations__", {})}
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.name != "self"}


def _check_kwargs(cls: type[Any], name: str, kwargs: dict[str, Any]) -> None:
    """Reject keyword arguments the class would silently store and ignore."""
    accepted = _accepted_kwargs(cls)
    if accepted is None:
        return
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, sorted(accepted), n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"image_processor.options.kwargs: {name} does not take {', '.join(hints)}")


def build_hf_image_processor(
    options: HFImageProcessorOptions | None, context: Any = None
) -> HFImageProcessor:
    """Factory of the ``hf`` image processor (``factory(options, context)``).

    With ``options.path``: ``AutoImageProcessor.from_pretrained(path, local_files_only=True,
    trust_remote_code=options.trust_remote_code, **options.kwargs)``. Otherwise the class
    ``options.class_name`` (default ``CLIPImageProcessor``) built with ``options.kwargs``.

    Raises:
        ConfigError: the directory is missing, or the class is unknown (close names suggested).
    """
    options = options if options is not None else HFImageProcessorOptions()
    import transformers

    if options.path is not None:
        path = Path(options.path).expanduser()
        if not path.is_dir():
            raise ConfigError(f"image_processor.options.path: {str(path)!r} is not a directory")
        if not (path / "preprocessor_config.json").is_file() and not any(path.glob("*.json")):
            raise ConfigError(
                f"image_processor.options.path: {str(path)!r} holds no preprocessor_config.json"
            )
        try:
            proc = transformers.AutoImageProcessor.from_pretrained(
                str(path),
                trust_remote_code=options.trust_remote_code,
                local_files_only=True,
                **options.kwargs,
            )
        except Exception as exc:
            raise PluginLoadError(
                f"image processor 'hf': cannot load from {str(path)!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return _with_tile_degradation(proc, options)
    name = options.class_name or DEFAULT_CLASS
    cls = getattr(transformers, name, None) if not name.startswith("_") else None
    if not _is_image_processor_class(cls, transformers):
        known = _image_processor_class_names(transformers)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ConfigError(
            f"image_processor.options.class_name: transformers has no image processor class {name!r}.{hint}"
        )
    _check_kwargs(cls, name, options.kwargs)
    try:
        proc = cls(**options.kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"image_processor.options.kwargs: {name} rejects {sorted(options.kwargs)}: {exc}"
        ) from exc
    return _with_tile_degradation(proc, options)


def _with_tile_degradation(proc: Any, options: HFImageProcessorOptions) -> HFImageProcessor:
    """``proc`` wrapped, with the tile degradation ``options`` ask for.

    Raises:
        ConfigError: ``degrade_tiles`` on a processor that does not tile, or whose maximum
            tiles per image is not a key of ``tile_degradation``.
    """
    if not options.degrade_tiles:
        return HFImageProcessor(proc)
    wrapped = HFImageProcessor(proc, options.tile_degradation)
    limit, name = wrapped.max_tiles, type(proc).__name__
    if limit is None:
        raise ConfigError(
            f"image_processor.options.degrade_tiles: {name} does not tile (classes that do: "
            f"{', '.join(sorted(TILE_LIMITS))}, with crop_to_patches: true)"
        )
    if limit > 1 and limit not in options.tile_degradation:
        raise ConfigError(
            f"image_processor.options.tile_degradation: {name} takes up to {limit} tiles per image, "
            f"which is not a key of {options.tile_degradation}"
        )
    return wrapped
