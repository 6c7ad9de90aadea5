"""The ``llava-clip`` image processor: LLaVA-1.5's CLIP ViT-L/14-336 preprocessing.

A transformers ``CLIPImageProcessor`` (its default, torchvision backend) with shortest edge
and crop set to ``image_size`` (336), built through the core's ``hf`` plugin. With ``image_aspect_ratio="pad"`` (LLaVA-1.5's default) every image is first padded
to a square, centred on a background of the processor's mean colour, so the crop keeps the
whole image.
"""

from typing import Any

from energon_plugin_llava.options import LlavaClipOptions
from energon_plugins import HFImageProcessor, HFImageProcessorOptions, build_hf_image_processor, to_pil


def pad_to_square(image: Any, background: tuple[int, int, int]) -> Any:
    """Pad a PIL image to a square, the image centred on ``background`` (LLaVA's expand2square)."""
    from PIL import Image

    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    canvas = Image.new(image.mode, (side, side), background)
    canvas.paste(image, ((side - width) // 2, (side - height) // 2))
    return canvas


def mean_color(processor: Any) -> tuple[int, int, int]:
    """The processor's ``image_mean`` as an 8-bit RGB colour."""
    mean = getattr(processor, "image_mean", None) or (0.5, 0.5, 0.5)
    return tuple(int(round(float(m) * 255)) for m in mean)  # type: ignore[return-value]


class LlavaImageProcessor:
    """A CLIP processor that optionally pads images to a square first (LLaVA-1.5).

    Call it like a Hugging Face processor: ``proc(images=[...], return_tensors="pt")``;
    accepts encoded images (bytes, what Energon hands over: ``image_input = "bytes"``), PIL
    images, arrays and Energon's CHW tensors. Attribute access (``crop_size``,
    ``image_mean``, ``output_size_for``, ...) falls through to the wrapped processor.
    """

    accepts_energon_images = True
    image_input = "bytes"

    def __init__(self, processor: HFImageProcessor, *, pad: bool) -> None:
        """Wrap ``processor`` (an ``HFImageProcessor``); ``pad`` switches square padding on."""
        self.inner = processor
        self.pad = pad
        self.background = mean_color(processor)

    def __call__(self, images: Any = None, **kwargs: Any) -> Any:
        if not self.pad:  # the wrapped processor decodes what it is given
            return self.inner(images=images, **kwargs)
        single = not isinstance(images, (list, tuple))
        items = [images] if single else list(images)
        pils = [pad_to_square(to_pil(img, index=i), self.background) for i, img in enumerate(items)]
        return self.inner(images=pils[0] if single else pils, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (e.g. during unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"LlavaImageProcessor(pad={self.pad}, {self.inner!r})"


def build_llava_clip(options: LlavaClipOptions | None, context: Any = None) -> LlavaImageProcessor:
    """Factory of ``llava-clip`` (``factory(options, context)``)."""
    options = options if options is not None else LlavaClipOptions()
    size = options.image_size
    hf = build_hf_image_processor(
        HFImageProcessorOptions(
            class_name="CLIPImageProcessor",
            kwargs={"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size}},
        ),
        context,
    )
    return LlavaImageProcessor(hf, pad=options.image_aspect_ratio == "pad")
