"""The ``qwen2-vl`` image processor: transformers' ``Qwen2VLImageProcessor``.

Dynamic resolution: each image is resized to multiples of ``patch_size * merge_size`` (28 px)
with between ``min_pixels`` and ``max_pixels`` pixels; the output is ``pixel_values`` of shape
``(patches, C * temporal_patch_size * patch_size^2)`` for all images together, and
``image_grid_thw`` ``(N, 3)``. Built through the core's ``hf`` plugin, so Energon's image
tensors are handed to it as the 8-bit images they were decoded from.
"""

from typing import Any

from energon_plugin_qwen_vl.options import Qwen2VLImageProcessorOptions
from energon_plugins import HFImageProcessor, HFImageProcessorOptions, build_hf_image_processor


def build_qwen2_vl_image_processor(
    options: Qwen2VLImageProcessorOptions | None, context: Any = None
) -> HFImageProcessor:
    """Factory of the ``qwen2-vl`` image processor (``factory(options, context)``)."""
    options = options if options is not None else Qwen2VLImageProcessorOptions()
    kwargs = {
        "min_pixels": options.min_pixels,
        "max_pixels": options.max_pixels,
        "patch_size": options.patch_size,
        "temporal_patch_size": options.temporal_patch_size,
        "merge_size": options.merge_size,
    }
    return build_hf_image_processor(
        HFImageProcessorOptions(class_name="Qwen2VLImageProcessor", kwargs=kwargs), context
    )
