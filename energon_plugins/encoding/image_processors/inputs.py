"""What form of image a processor wants, how Energon decodes for it, and the conversions.

An image processor declares the input it wants with a class or instance attribute
``image_input``:

- ``"bytes"``: the encoded file as stored in the dataset (JPEG, PNG, ...). Energon decodes no
  image (the shuffle and packing buffers hold the compressed bytes) and the processor decodes
  itself, e.g. with PIL's JPEG draft mode straight to the size it needs.
- ``"uint8"``: an RGB ``uint8`` tensor ``(3, H, W)`` (Energon's ``torchrgb8`` decode).
- ``"pil"``: an RGB PIL image (Energon's ``pil`` decode).
- ``"float"``, or no attribute: Energon's default ``torchrgb`` decode, float32 in ``[0, 1]``
  (what processors written before this attribute existed receive).

:func:`decoder_for` gives the Energon decoder for a processor; a task encoder based on
:class:`~energon_plugins.PluginTaskEncoder` sets it as its ``decoder``. The conversions
(:func:`to_uint8_chw`, :func:`to_pil`, :func:`image_size`) accept every form (bytes, PIL
images, numpy arrays, uint8 or float tensors), so a processor stays usable on any input.

Nothing here imports torch, PIL or Energon at module import.
"""

from __future__ import annotations

import io
from typing import Any, Literal

ImageInput = Literal["bytes", "uint8", "pil", "float"]

IMAGE_INPUTS: tuple[str, ...] = ("bytes", "uint8", "pil", "float")

ENERGON_IMAGE_DECODE: dict[str, str | None] = {
    "bytes": None,
    "uint8": "torchrgb8",
    "pil": "pil",
    "float": "torchrgb",
}
"""``image_input`` -> Energon's ``SampleDecoder(image_decode=...)`` (None: images stay bytes)."""

RAW_IMAGE_DECODE = "raw"
"""The ``image_decode`` value :class:`RawImageDecoder` reports in its config."""


def declared_input(processor: Any) -> str | None:
    """The ``image_input`` ``processor`` declares, or None when it declares none.

    Raises:
        ValueError: the declared value is not one of :data:`IMAGE_INPUTS`.
    """
    value = getattr(processor, "image_input", None) if processor is not None else None
    if value is None:
        return None
    if value not in IMAGE_INPUTS:
        raise ValueError(
            f"image processor {type(processor).__name__}: image_input {value!r} is not one of "
            f"{', '.join(IMAGE_INPUTS)}"
        )
    return str(value)


def decoder_for(processor: Any) -> Any:
    """The Energon decoder that hands ``processor`` the images it declares it wants.

    Returns ``None`` when the processor declares nothing (keep Energon's default decoder),
    a :class:`RawImageDecoder` for ``"bytes"``, else ``SampleDecoder(image_decode=...)``.
    """
    wanted = declared_input(processor)
    if wanted is None:
        return None
    decode = ENERGON_IMAGE_DECODE[wanted]
    if decode is None:
        preload_decoding()
        return raw_image_decoder()
    from megatron.energon import SampleDecoder

    return SampleDecoder(image_decode=decode)


def preload_decoding() -> None:
    """Import what decoding encoded images here needs (torchvision's image IO, PIL's format
    plugins) now, while a loader is being built, rather than during its first batch.

    Energon's ``GcDataset`` runs ``gc.freeze()`` when an iteration starts and ``gc.collect()``
    every 10 batches, and every collection scans the objects created after the freeze. A first
    ``torchvision.io`` import inside the first batch brings about 1,000 modules (torchvision's
    models and ops, ``torch.onnx``, sympy) and 150,000 objects with it: each collection then
    took about 60 ms instead of 0.6 ms, a sixth of a 0-worker loader's time. Imported while
    the loader is built, before its workers fork, they are frozen in every process.
    """
    import PIL.Image
    import torchvision.io  # noqa: F401

    PIL.Image.init()


def raw_image_decoder() -> Any:
    """A decoder that leaves images as their encoded bytes and decodes every other part.

    JSON, text and the other webdataset parts are decoded as Energon's default decoder does;
    video and audio parts still get Energon's AV decoder. Only image files stay ``bytes``;
    their header is read (about 20 µs), so a part that is no image fails at decoding, where
    Energon reports it (as an ``image`` decoding error of that part), not later.
    """
    return _raw_decoder_class()()


def _checked_image_bytes(key: str, data: bytes) -> bytes | None:
    """webdataset handler: an image part stays ``bytes`` once PIL recognises its header."""
    from webdataset.autodecode import IMAGE_EXTENSIONS

    if key.rsplit(".", 1)[-1].lower() not in IMAGE_EXTENSIONS:
        return None
    _open(data)
    return data


def _raw_decoder_class() -> type:
    global _RAW_DECODER
    if _RAW_DECODER is None:
        import webdataset
        from megatron.energon import SampleDecoder
        from megatron.energon.av import AVWebdatasetDecoder
        from megatron.energon.flavors.webdataset.sample_decoder import GuessingHandlerWrapper

        class RawImageDecoder(SampleDecoder):
            """Energon's ``SampleDecoder`` without the image handler: images stay bytes."""

            def __init__(
                self,
                *,
                av_decode: Any = "AVDecoder",
                video_decode_audio: bool = False,
                guess_content: bool = False,
            ) -> None:
                super().__init__(
                    av_decode=av_decode, video_decode_audio=video_decode_audio, guess_content=guess_content
                )
                self._config = {**self.config(), "image_decode": RAW_IMAGE_DECODE}
                self._decoder = webdataset.autodecode.Decoder(
                    GuessingHandlerWrapper.wrap(
                        guess_content,
                        [
                            _checked_image_bytes,
                            AVWebdatasetDecoder(video_decode_audio=video_decode_audio, av_decode=av_decode),
                        ],
                    )
                )

        RawImageDecoder.__module__ = __name__
        RawImageDecoder.__qualname__ = "RawImageDecoder"
        _RAW_DECODER = RawImageDecoder
    return _RAW_DECODER


_RAW_DECODER: type | None = None


def __getattr__(name: str) -> Any:
    # ``RawImageDecoder`` is built on first access (it subclasses Energon's decoder), and
    # pickling the decoder into loader workers finds it here by name.
    if name == "RawImageDecoder":
        return _raw_decoder_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- conversions


def is_encoded(image: Any) -> bool:
    """Whether ``image`` is an encoded file (``bytes``, ``bytearray`` or ``memoryview``)."""
    return isinstance(image, (bytes, bytearray, memoryview))


def _is_pil(image: Any) -> bool:
    return type(image).__module__.startswith("PIL.")


def _open(data: Any, index: int | None = None) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError as exc:
        where = f"images[{index}]" if index is not None else "image"
        raise ValueError(f"{where}: {len(data)} bytes that are not an image file PIL can read") from exc


def _channels_first(shape: tuple[int, ...]) -> bool:
    """Whether a 3-D array shape is ``(C, H, W)`` (Energon's layout) rather than ``(H, W, C)``."""
    return shape[0] in (1, 3, 4) and (shape[-1] not in (1, 3, 4) or shape[0] <= shape[-1])


def image_height_width(image: Any) -> tuple[int, int]:
    """``(height, width)`` of any image form; encoded files are read up to their header only."""
    if is_encoded(image):
        width, height = _open(image).size
        return height, width
    if _is_pil(image):
        return image.height, image.width
    shape = tuple(getattr(image, "shape", ()))
    if len(shape) == 2:
        return int(shape[0]), int(shape[1])
    if len(shape) == 3:
        return (int(shape[1]), int(shape[2])) if _channels_first(shape) else (int(shape[0]), int(shape[1]))
    raise ValueError(f"cannot tell the size of an image of type {type(image).__name__}")


def _draft(img: Any, min_size: tuple[int, int] | None) -> bool:
    """Ask PIL's JPEG decoder for a DCT-domain downscale that keeps ``min_size``; True if it did."""
    if min_size is None or img.format != "JPEG":
        return False
    height, width = min_size
    before = img.size
    img.draft("RGB", (max(1, int(width)), max(1, int(height))))
    return img.size != before


def decode_pil(data: Any, min_size: tuple[int, int] | None = None, index: int | None = None) -> Any:
    """Decode an encoded image to an RGB PIL image (as Energon's ``pil`` decode does).

    ``min_size`` ``(height, width)``: for a JPEG, decode at 1/2, 1/4 or 1/8 scale in the DCT
    domain (PIL's draft mode) as long as the result stays at least that large.
    """
    img = _open(data, index)
    _draft(img, min_size)
    img.load()
    return img if img.mode == "RGB" else img.convert("RGB")


def decode_uint8(data: Any, min_size: tuple[int, int] | None = None, index: int | None = None) -> Any:
    """Decode an encoded image to an RGB ``uint8`` tensor ``(3, H, W)`` (a channels-last view).

    Equal to Energon's ``torchrgb8`` decode. Full-size JPEGs in RGB or grey are decoded by
    torchvision (libjpeg-turbo, the same pixels as PIL, without PIL's copies); ``min_size``
    enables PIL's draft mode as in :func:`decode_pil`.
    """
    import numpy as np
    import torch

    img = _open(data, index)
    if not _draft(img, min_size) and img.format == "JPEG" and img.mode in ("RGB", "L"):
        from torchvision.io import ImageReadMode, decode_jpeg

        return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    img.load()
    if img.mode != "RGB":
        img = img.convert("RGB")
    return torch.from_numpy(np.array(img)).permute(2, 0, 1)


def to_uint8_chw(image: Any, min_size: tuple[int, int] | None = None, index: int | None = None) -> Any:
    """Any image form as an RGB ``uint8`` tensor ``(3, H, W)`` (possibly a view).

    Encoded files are decoded (:func:`decode_uint8`); PIL images converted to RGB; float
    images in ``[0, 1]`` (Energon's default decode) scaled to 0-255 and rounded; grey is
    repeated and alpha dropped.
    """
    import numpy as np
    import torch

    if is_encoded(image):
        return decode_uint8(image, min_size, index)
    if _is_pil(image):
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        return torch.from_numpy(np.array(rgb)).permute(2, 0, 1)
    tensor = torch.from_numpy(np.asarray(image)) if isinstance(image, np.ndarray) else image
    if not torch.is_tensor(tensor):
        where = f"images[{index}]" if index is not None else "image"
        raise TypeError(
            f"{where}: expected bytes, a PIL image, an array or a tensor, got {type(image).__name__}"
        )
    tensor = tensor.detach().cpu()
    if tensor.dim() == 2:
        tensor = tensor[None]
    elif tensor.dim() == 3 and not _channels_first(tuple(tensor.shape)):
        tensor = tensor.permute(2, 0, 1)
    if tensor.dim() != 3:
        raise ValueError(f"expected an image of 2 or 3 dimensions, got shape {tuple(tensor.shape)}")
    if tensor.dtype != torch.uint8:
        if tensor.is_floating_point():
            array = tensor.float().numpy()
            tensor = torch.from_numpy(np.rint(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8))
        else:
            tensor = tensor.clamp(0, 255).to(torch.uint8)
    channels = tensor.shape[0]
    if channels == 1:
        return tensor.expand(3, -1, -1)
    if channels == 4:
        return tensor[:3]
    if channels != 3:
        raise ValueError(f"expected 1, 3 or 4 channels, got {channels}")
    return tensor


def to_pil(image: Any, min_size: tuple[int, int] | None = None, index: int | None = None) -> Any:
    """Any image form as an RGB PIL image (encoded files decoded, tensors converted)."""
    if is_encoded(image):
        return decode_pil(image, min_size, index)
    if _is_pil(image):
        return image if image.mode == "RGB" else image.convert("RGB")
    import numpy as np
    from PIL import Image

    chw = to_uint8_chw(image, index=index)
    return Image.fromarray(np.ascontiguousarray(chw.permute(1, 2, 0).numpy()))
