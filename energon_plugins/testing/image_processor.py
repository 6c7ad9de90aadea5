"""``check_image_processor``: the image-processor contract, on images as Energon decodes them.

Rules (each named in the :class:`~energon_plugins.testing.ConformanceError` it raises):

- the registration and options rules of :func:`~energon_plugins.testing.check_registration`
  and :func:`~energon_plugins.testing.check_options`;
- ``builds``: the factory builds from a :class:`~energon_plugins.BuildContext`;
- ``callable``: ``proc(images=[...], return_tensors="pt")`` accepts CHW float tensors in
  ``[0, 1]`` (what Energon's decoder yields) of mixed sizes, and returns a mapping;
- ``pixel-values``: the mapping has a floating-point, finite ``pixel_values`` tensor with one
  entry per image (``(N, C, H, W)``), or patches described by ``image_grid_thw``
  (``(N, 3)`` grids whose products sum to the number of patch rows): the loader checks the
  same (:func:`~energon_plugins.encoding.plugin_outputs.image_output_problem`, less strictly
  about the layout) on the first processor call of each loader;
- ``deterministic``: the same call twice gives equal tensors;
- ``per-image``: an image processed alone equals its slice of the batch (batching does not
  change an image's pixels);
- ``float-input``: a float ``[0, 1]`` tensor gives the pixel values of the same image as a
  PIL image (the classic bug: rescaling by 1/255 a second time).
"""

from collections.abc import Mapping
from typing import Any

from energon_plugins.testing._common import check_and_build, fail

#: Sizes (height, width) of the test images: mixed, portrait and landscape, one tiny.
IMAGE_SIZES = ((40, 56), (64, 48), (31, 31), (12, 20))

#: Largest mean absolute difference allowed between float-tensor and PIL input (in
#: normalised units; 0-255 rounding and resampling stay far below it, a double rescale is ~1).
FLOAT_INPUT_TOLERANCE = 0.05
PER_IMAGE_TOLERANCE = 1e-4


def make_test_images(sizes: tuple[tuple[int, int], ...] = IMAGE_SIZES, seed: int = 0) -> list[Any]:
    """Smooth uint8 RGB images ``(H, W, 3)`` of ``sizes`` (gradients and a block), seeded."""
    import numpy as np

    rng = np.random.default_rng(seed)
    images = []
    for height, width in sizes:
        y, x = np.meshgrid(np.linspace(0, 1, height), np.linspace(0, 1, width), indexing="ij")
        base = rng.uniform(0.2, 0.8, size=3)
        channels = [base[0] + 0.3 * y, base[1] + 0.3 * x, base[2] + 0.2 * (x - y)]
        image = np.clip(np.stack(channels, axis=-1), 0, 1)
        top, left = height // 4, width // 4
        image[top : top + height // 3, left : left + width // 3] = rng.uniform(0, 1, size=3)
        images.append(np.round(image * 255).astype(np.uint8))
    return images


def as_energon_tensor(image: Any) -> Any:
    """A uint8 ``(H, W, 3)`` array as Energon decodes images: ``(3, H, W)`` float in [0, 1]."""
    import torch

    return torch.from_numpy(image).permute(2, 0, 1).contiguous().float() / 255.0


def check_image_processor(
    name: str,
    *,
    options: Mapping[str, Any] | Any = None,
    context: Any = None,
) -> Any:
    """Check that the image processor ``name`` keeps the contract; return the built processor.

    Args:
        name: the registered name (or ``distribution:name``).
        options: the plugin's options to check with (``None``: defaults).
        context: the :class:`~energon_plugins.BuildContext` handed to the factory (default: an
            empty one; image processors rarely need it).

    Raises:
        ConformanceError: naming the plugin and the rule it breaks (see the module docstring).
    """
    import torch

    spec, proc = check_and_build("image_processor", name, options, context)
    label = spec.label
    if not callable(proc):
        fail(
            label,
            "callable",
            f"the factory returned {type(proc).__qualname__}, which is not "
            "callable like a transformers image processor",
        )

    arrays = make_test_images()
    tensors = [as_energon_tensor(a) for a in arrays]
    out = _call(label, proc, tensors, "CHW float [0, 1] tensors of mixed sizes")
    pixels, grid = _pixels(label, out, len(tensors))

    again, again_grid = _pixels(label, _call(label, proc, tensors, "a second call"), len(tensors))
    if again.shape != pixels.shape or not torch.equal(again, pixels):
        fail(label, "deterministic", "the same images gave different pixel_values on a second call")
    if (grid is None) != (again_grid is None) or (grid is not None and not torch.equal(grid, again_grid)):
        fail(label, "deterministic", "the same images gave different image_grid_thw")

    slices = _per_image(pixels, grid, len(tensors))
    for index, tensor in enumerate(tensors):
        alone, alone_grid = _pixels(label, _call(label, proc, [tensor], f"image {index} alone"), 1)
        if alone.shape[1:] != slices[index].shape[1:] or alone.shape[0] != slices[index].shape[0]:
            fail(
                label,
                "per-image",
                f"image {index} {tuple(tensor.shape)} alone gives pixel_values "
                f"{tuple(alone.shape)}, but its part of the batch is {tuple(slices[index].shape)}",
            )
        if not torch.allclose(alone, slices[index], atol=PER_IMAGE_TOLERANCE, rtol=0):
            diff = float((alone - slices[index]).abs().max())
            fail(
                label,
                "per-image",
                f"image {index} alone differs from its part of the batch (max abs difference {diff:.3g})",
            )

    import PIL.Image

    pil_images = [PIL.Image.fromarray(a) for a in arrays]
    pil_pixels, _ = _pixels(label, _call(label, proc, pil_images, "PIL images"), len(arrays))
    if pil_pixels.shape != pixels.shape:
        fail(
            label,
            "float-input",
            f"PIL input gives pixel_values {tuple(pil_pixels.shape)}, float tensors {tuple(pixels.shape)}",
        )
    mean_diff = float((pil_pixels.float() - pixels.float()).abs().mean())
    if mean_diff > FLOAT_INPUT_TOLERANCE:
        fail(
            label,
            "float-input",
            f"CHW float [0, 1] tensors (Energon's decoded images) give pixel values that differ "
            f"from the same images as PIL by {mean_diff:.3f} on average (> "
            f"{FLOAT_INPUT_TOLERANCE}); float input is probably rescaled by 1/255 a second time",
        )
    return proc


def _call(label: str, proc: Any, images: list[Any], what: str) -> Any:
    try:
        out = proc(images=images, return_tensors="pt")
    except Exception as exc:  # noqa: BLE001 - reported under the rule
        fail(
            label,
            "callable",
            f"proc(images=[...], return_tensors='pt') on {what} raised {type(exc).__name__}: {exc}",
        )
    if not isinstance(out, Mapping):
        fail(
            label,
            "callable",
            f"on {what} it returned {type(out).__qualname__}, not a mapping with pixel_values",
        )
    return out


def _pixels(label: str, out: Mapping, count: int) -> tuple[Any, Any]:
    """``(pixel_values, image_grid_thw)`` of ``out`` after the rules the loader checks too
    (:func:`~energon_plugins.encoding.plugin_outputs.image_output_problem`, strictly)."""
    import torch

    from energon_plugins.encoding.plugin_outputs import image_output_problem

    problem = image_output_problem(out, count, strict=True)
    if problem is not None:
        fail(label, *problem)
    grid = out.get("image_grid_thw")
    return out["pixel_values"], None if grid is None else torch.as_tensor(grid)


def _per_image(pixels: Any, grid: Any, count: int) -> list[Any]:
    if grid is None:
        return [pixels[i : i + 1] for i in range(count)]
    sizes = grid.prod(dim=-1).tolist()
    out, start = [], 0
    for size in sizes:
        out.append(pixels[start : start + int(size)])
        start += int(size)
    return out
