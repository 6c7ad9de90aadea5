"""The fast image processor: batched torch preprocessing on uint8, like a transformers processor.

Pipeline per call: decode encoded images (the form Energon hands over: ``image_input =
"bytes"``; JPEGs by torchvision, or in PIL's draft mode at a reduced scale with ``jpeg_draft``)
or convert other inputs to uint8 HWC tensors (zero-copy where possible), group the images by
size, resize each group, then one fused rescale+normalize into a float32 ``(N, 3, H, W)``
batch. Resize kernels:

- ``torchvision`` (default): torch's uint8 antialiased kernel in one call, exactly what
  transformers' default (torchvision) backend does;
- ``pillow``: Pillow's own arithmetic (``pil_resize``: its fixed-point bicubic/bilinear taps,
  pass order and rounding, as two banded matrix products per group), what transformers' PIL
  backend does, computing only the pixels that survive the center crop;
- ``torch``: torch's uint8 kernel in Pillow's pass order.
"""

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from energon_plugin_fast_image.pil_resize import resize_batch, vertical_first
from energon_plugin_fast_image.settings import ProcessorSettings, resolve_settings
from energon_plugins import decode_uint8, image_height_width, is_encoded, new_output

_PIL_CODES = {"nearest": 0, "bilinear": 2, "bicubic": 3}


class FastBatchFeature(dict):
    """The result mapping: ``out["pixel_values"]``, ``out.pixel_values`` and ``out.to(device)``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, *args: Any, **kwargs: Any) -> "FastBatchFeature":
        """Move every tensor value (like ``BatchFeature.to``); returns a new mapping."""
        return FastBatchFeature(
            {k: v.to(*args, **kwargs) if torch.is_tensor(v) else v for k, v in self.items()}
        )


def _is_pil(image: Any) -> bool:
    return type(image).__module__.startswith("PIL.")


def to_uint8_hwc(image: Any, index: int = 0) -> torch.Tensor:
    """Convert one image to an RGB ``uint8`` tensor of shape ``(H, W, 3)`` (may be a view).

    Accepts PIL images, numpy arrays and torch tensors, ``(H, W)``, ``(C, H, W)`` or
    ``(H, W, C)`` with 1, 3 or 4 channels (alpha is dropped, grey is repeated). Floating-point
    inputs are taken to be in ``[0, 1]`` (Energon's default decode) and scaled to 0-255.

    Raises:
        TypeError, ValueError: naming ``images[index]`` and what is wrong with it.
    """
    if is_encoded(image):
        return decode_uint8(image, index=index).permute(1, 2, 0)
    if _is_pil(image):
        if image.mode != "RGB":
            image = image.convert("RGB")
        return torch.from_numpy(np.array(image))
    if isinstance(image, np.ndarray):
        tensor = torch.from_numpy(np.ascontiguousarray(image) if image.dtype.byteorder == ">" else image)
    elif torch.is_tensor(image):
        tensor = image.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
    else:
        raise TypeError(
            f"images[{index}]: expected a PIL image, numpy array or torch tensor, got {type(image).__name__}"
        )
    if tensor.ndim == 2:
        tensor = tensor[:, :, None]
    elif tensor.ndim == 3:
        if tensor.shape[0] in (1, 3, 4) and tensor.shape[-1] not in (1, 3, 4):
            tensor = tensor.permute(1, 2, 0)
        elif tensor.shape[-1] not in (1, 3, 4):
            raise ValueError(
                f"images[{index}]: cannot tell the channel axis of shape {tuple(tensor.shape)}; "
                "expected 1, 3 or 4 channels first or last"
            )
        elif tensor.shape[0] in (1, 3, 4) and tensor.shape[-1] in (1, 3, 4):
            # Ambiguous (e.g. 3x3x3): channels first, as Energon's decoders produce.
            tensor = tensor.permute(1, 2, 0)
    else:
        raise ValueError(f"images[{index}]: expected 2 or 3 dimensions, got shape {tuple(tensor.shape)}")
    if tensor.dtype != torch.uint8:
        if tensor.is_floating_point():
            # numpy, single-threaded: per-image torch ops pay the intra-op pool's latency,
            # which is severe when other processes load the cores.
            array = tensor.float().numpy()
            tensor = torch.from_numpy(np.rint(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8))
        elif tensor.dtype == torch.bool:
            tensor = tensor.to(torch.uint8) * 255
        else:
            tensor = tensor.clamp(0, 255).to(torch.uint8)
    channels = tensor.shape[-1]
    if channels == 4:
        tensor = tensor[..., :3]
    elif channels == 1:
        tensor = tensor.expand(-1, -1, 3)
    return tensor


def _flatten(images: Any) -> list[Any]:
    if images is None:
        raise ValueError("images: no images given")
    if _is_pil(images) or is_encoded(images) or isinstance(images, np.ndarray) and images.ndim <= 3:
        return [images]
    if torch.is_tensor(images):
        return [images] if images.ndim <= 3 else list(images)
    if isinstance(images, np.ndarray):
        return list(images)
    if isinstance(images, Iterable):
        out: list[Any] = []
        for item in images:
            if isinstance(item, (list, tuple)):
                out.extend(item)
            else:
                out.append(item)
        return out
    return [images]


def call_items(name: str, images: Any, kwargs: dict[str, Any]) -> list[Any]:
    """The images of a processor call as a list; unsupported keyword arguments are refused
    with an error that names them, rather than silently ignored."""
    if kwargs:
        raise TypeError(
            f"{name}: unsupported arguments {sorted(kwargs)}; set processor settings through the "
            "plugin's options"
        )
    items = _flatten(images)
    if not items:
        raise ValueError("images: the list is empty")
    return items


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` inside the block (None: unchanged)."""
    previous = torch.get_num_threads()
    change = count is not None and count != previous
    if change:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if change:
            torch.set_num_threads(previous)


@dataclasses.dataclass
class FastImageProcessor:
    """A callable image processor with the settings and call shape of a transformers one.

    ``proc(images=[...], return_tensors="pt")`` returns a mapping with ``pixel_values`` of shape
    ``(N, 3, H, W)``, float32. The settings are attributes named as in transformers
    (``size``, ``crop_size``, ``image_mean``, ...), so encoders can compute token counts with
    ``proc.crop_size["height"]``. ``resample`` is PIL's integer code, as in transformers.
    """

    accepts_energon_images = True
    """Energon's image tensors (CHW float in [0, 1] or uint8) are accepted as they are."""
    image_input = "bytes"
    """Energon hands over the encoded images; they are decoded here (torchvision for JPEGs)."""

    settings: ProcessorSettings
    family: str = "clip"
    torch_threads: int | None = None
    """torch intra-op threads while a call runs (restored after), or None to leave them."""
    model_input_names: list[str] = dataclasses.field(default_factory=lambda: ["pixel_values"])

    def __post_init__(self) -> None:
        s = self.settings
        std = torch.tensor(s.image_std, dtype=torch.float32)
        mean = torch.tensor(s.image_mean, dtype=torch.float32)
        scale = torch.full((3,), s.rescale_factor if s.do_rescale else 1.0)
        if s.do_normalize:
            self._scale, self._bias = scale / std, -mean / std
        else:
            self._scale, self._bias = scale, torch.zeros(3)
        self._scale = self._scale.view(1, 3, 1, 1)
        self._bias = self._bias.view(1, 3, 1, 1)

    # -- transformers-style attributes ---------------------------------------------------------
    do_resize = property(lambda self: self.settings.do_resize)
    size = property(lambda self: dict(self.settings.size))
    do_center_crop = property(lambda self: self.settings.do_center_crop)
    crop_size = property(lambda self: dict(self.settings.crop_size) if self.settings.crop_size else None)
    do_rescale = property(lambda self: self.settings.do_rescale)
    rescale_factor = property(lambda self: self.settings.rescale_factor)
    do_normalize = property(lambda self: self.settings.do_normalize)
    image_mean = property(lambda self: list(self.settings.image_mean))
    image_std = property(lambda self: list(self.settings.image_std))
    resample = property(lambda self: _PIL_CODES[self.settings.resample])

    @property
    def output_size(self) -> tuple[int, int] | None:
        """``(height, width)`` of every output image, or ``None`` if it depends on the input."""
        s = self.settings
        if s.do_center_crop and s.crop_size:
            return s.crop_size["height"], s.crop_size["width"]
        if s.do_resize and "height" in s.size:
            return s.size["height"], s.size["width"]
        return None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a transformers-style dict (``resample`` as PIL's code)."""
        out = dataclasses.asdict(self.settings)
        out["resample"] = self.resample
        out["image_processor_type"] = f"fast-{self.family}"
        return out

    # -- processing ----------------------------------------------------------------------------
    def resize_target(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` an input of this size is resized to (transformers' rule)."""
        size = self.settings.size
        if "shortest_edge" in size:
            edge = size["shortest_edge"]
            short, long = (width, height) if width <= height else (height, width)
            new_long = int(edge * long / short)
            return (new_long, edge) if width <= height else (edge, new_long)
        return size["height"], size["width"]

    resize_kernel: str = "torchvision"
    """``"torchvision"`` (torch's uint8 kernel in one call, as transformers' default backend),
    ``"pillow"`` (Pillow's arithmetic, ``pil_resize``) or ``"torch"`` (torch's uint8 kernel in
    Pillow's pass order)."""
    jpeg_draft: bool = False
    """Decode JPEGs at 1/2, 1/4 or 1/8 scale in the DCT domain when the resize target allows."""
    resize_dtype: torch.dtype = dataclasses.field(default=torch.float32, repr=False)
    """float32 (fast; a rare pixel one level off Pillow) or float64 (Pillow's result exactly)."""

    def output_size_for(self, height: int, width: int) -> tuple[int, int]:
        """``(H, W)`` of the pixels an image of this size comes out at (known before decoding)."""
        s = self.settings
        if s.do_center_crop and s.crop_size:
            return s.crop_size["height"], s.crop_size["width"]
        if s.do_resize:
            return self.resize_target(height, width)
        return height, width

    def _crop_window(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """``(top, left, h, w)`` of the center crop inside a ``height x width`` image, if it fits."""
        s = self.settings
        if not (s.do_center_crop and s.crop_size):
            return None
        ch, cw = s.crop_size["height"], s.crop_size["width"]
        if height < ch or width < cw:
            return None
        return (height - ch) // 2, (width - cw) // 2, ch, cw

    def _resize_group(self, batch: torch.Tensor, target: tuple[int, int]) -> torch.Tensor:
        """Resize a uint8 ``(n, 3, H, W)`` batch to ``target`` (cropped already if a crop follows).

        Bicubic and bilinear give Pillow's result (float, integer values); nearest uses torch's
        ``nearest-exact`` (uint8).
        """
        if tuple(batch.shape[-2:]) == target:
            return batch
        mode = self.settings.resample
        if mode == "nearest":
            return F.interpolate(batch, size=target, mode="nearest-exact")
        if self.resize_kernel == "torchvision":  # one call, as torchvision's resize makes it
            return F.interpolate(batch, size=target, mode=mode, antialias=True, align_corners=False)
        if self.resize_kernel == "torch":
            height, width = batch.shape[-2:]
            if vertical_first(height, width, *target):  # Pillow's pass order
                batch = F.interpolate(batch, size=(target[0], width), mode=mode, antialias=True)
            return F.interpolate(batch, size=target, mode=mode, antialias=True, align_corners=False)
        crop = self._crop_window(*target)
        return resize_batch(batch, target, crop, mode, self.resize_dtype)

    def _center_crop(self, image: torch.Tensor) -> torch.Tensor:
        """Crop ``(..., H, W)`` around the centre as transformers does; zero-pad if too small."""
        ch, cw = self.settings.crop_size["height"], self.settings.crop_size["width"]
        h, w = image.shape[-2:]
        if h >= ch and w >= cw:
            top, left = (h - ch) // 2, (w - cw) // 2
            return image[..., top : top + ch, left : left + cw]
        nh, nw = max(h, ch), max(w, cw)
        padded = image.new_zeros((*image.shape[:-2], nh, nw))
        if self.resize_kernel == "torchvision":  # torchvision pads the smaller half first
            top, left = (nh - h) // 2, (nw - w) // 2
        else:  # transformers' numpy center_crop
            top, left = (nh - h + 1) // 2, (nw - w + 1) // 2
        padded[..., top : top + h, left : left + w] = image
        return self._center_crop(padded)

    def process_uint8(
        self, images: Sequence[torch.Tensor], targets: Sequence[tuple[int, int] | None] | None = None
    ) -> list[torch.Tensor]:
        """Resize and crop uint8 ``(H, W, 3)`` tensors; return ``(3, h, w)`` views in order.

        ``targets[i]`` is the resize target of image ``i`` when it was decoded at a reduced
        scale (computed from its original size); None: from its own size. Images of the same
        size and target are stacked and resized together. A view is uint8, or float holding
        integer values 0-255 when the ``pillow`` kernel resized it.
        """
        out: list[torch.Tensor | None] = [None] * len(images)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, image in enumerate(images):
            target = targets[i] if targets is not None else None
            groups.setdefault((*image.shape[:2], target), []).append(i)
        for (height, width, target), indices in groups.items():
            if len(indices) == 1:
                batch = images[indices[0]].permute(2, 0, 1)[None]
            else:
                batch = torch.stack([images[i].permute(2, 0, 1) for i in indices])
            if self.settings.do_resize:
                target = target or self.resize_target(height, width)
                if (height, width) != target:
                    batch = self._resize_group(batch, target)
            if self.settings.do_center_crop:
                batch = self._center_crop(batch)
            for j, i in enumerate(indices):
                out[i] = batch[j]
        return out  # type: ignore[return-value]

    def normalize(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """Stack uint8 ``(3, h, w)`` images and apply rescale+normalize in one float32 pass."""
        shapes = {tuple(img.shape) for img in images}
        if len(shapes) > 1:
            raise ValueError(
                f"images: processed sizes differ {sorted(shapes)} and cannot be stacked; set "
                "do_center_crop with crop_size, or a fixed size {height, width}"
            )
        (c, h, w) = shapes.pop()
        out = new_output((len(images), c, h, w))  # shared memory in a loader worker
        scale, bias = self._scale[0], self._bias[0]
        for k, img in enumerate(images):
            if img.is_floating_point():
                # A resized image is a strided float view: lay it out first (addcmul on a
                # permuted view is several times slower), then scale in place.
                out[k].copy_(img).mul_(scale).add_(bias)
            else:
                # One fused pass per image (uint8 in, float32 out) while the image is in cache.
                torch.addcmul(bias, img, scale, out=out[k])
        return out

    def __call__(self, images: Any = None, return_tensors: str | None = "pt", **kwargs: Any):
        """Preprocess ``images`` (one image or a list); returns a mapping with ``pixel_values``.

        ``return_tensors``: ``"pt"`` (default; ``None`` too) or ``"np"``. Other keyword arguments
        of transformers processors (``text``, ``do_resize``...) are refused with an error that
        names them, rather than silently ignored.
        """
        items = call_items(f"fast-{self.family}", images, kwargs)
        with torch_threads(self.torch_threads):
            prepared = [self._decode(img, i) for i, img in enumerate(items)]
            pixel_values = self.normalize(
                self.process_uint8([hwc for hwc, _ in prepared], [t for _, t in prepared])
            )
        if return_tensors in (None, "pt"):
            return FastBatchFeature(pixel_values=pixel_values)
        if return_tensors == "np":
            return FastBatchFeature(pixel_values=pixel_values.numpy())
        raise ValueError(f"return_tensors: expected 'pt' or 'np', got {return_tensors!r}")

    preprocess = __call__

    def _decode(self, image: Any, index: int) -> tuple[torch.Tensor, tuple[int, int] | None]:
        """``(uint8 HWC tensor, resize target)``; encoded JPEGs in draft mode when allowed."""
        if not (self.jpeg_draft and is_encoded(image) and self.settings.do_resize):
            return to_uint8_hwc(image, index), None
        target = self.resize_target(*image_height_width(image))
        return decode_uint8(image, min_size=target, index=index).permute(1, 2, 0), target


def _threads(options: Any) -> int | None:
    """``options.torch_threads``; 1 (the option's default) when no options were given."""
    return getattr(options, "torch_threads", 1) if options is not None else 1


def _kernel(options: Any) -> str:
    """``options.resize_kernel``; ``"torchvision"`` when no options were given."""
    return getattr(options, "resize_kernel", "torchvision") if options is not None else "torchvision"


def _draft(options: Any) -> bool:
    """``options.jpeg_draft``; False when no options were given."""
    return bool(getattr(options, "jpeg_draft", False)) if options is not None else False


def _build(family: str, options: Any) -> FastImageProcessor:
    return FastImageProcessor(
        resolve_settings(family, options),
        family,
        _threads(options),
        resize_kernel=_kernel(options),
        jpeg_draft=_draft(options),
    )


def build_fast_clip(options: Any, context: Any = None) -> FastImageProcessor:
    """Factory of ``fast-clip``: CLIPImageProcessor settings, overridden by ``options``."""
    return _build("clip", options)


def build_fast_siglip(options: Any, context: Any = None) -> FastImageProcessor:
    """Factory of ``fast-siglip``: SiglipImageProcessor settings, overridden by ``options``."""
    return _build("siglip", options)
