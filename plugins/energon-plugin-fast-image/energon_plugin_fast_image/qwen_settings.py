"""Settings of ``fast-qwen2-vl``: a model preset, then a preprocessor_config.json, then options.

Import-light (json, math and dataclasses only). :func:`smart_resize` is Qwen2-VL's published
resize rule, written from its description: both sides rounded to multiples of
``patch_size * merge_size``, the pixel count brought into ``[min_pixels, max_pixels]``
keeping the aspect ratio.
"""

import dataclasses
import math
from typing import Any

from energon_plugin_fast_image.settings import (
    IMAGENET_STANDARD_MEAN,
    IMAGENET_STANDARD_STD,
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    read_json_config,
)

_QWEN2 = {
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 1280,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
}

PRESETS: dict[str, dict[str, Any]] = {
    # transformers' Qwen2VLImageProcessor() class defaults; Qwen2.5-VL uses the same class.
    "qwen2-vl": dict(_QWEN2),
    "qwen2.5-vl": dict(_QWEN2),
    # The Qwen3-VL checkpoints' preprocessor_config.json (Qwen2VLImageProcessor with these).
    "qwen3-vl": {
        "min_pixels": 65536,
        "max_pixels": 16777216,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": IMAGENET_STANDARD_MEAN,
        "image_std": IMAGENET_STANDARD_STD,
    },
}
"""Model name -> settings; a plugin may add a model whose preprocessing is Qwen2-VL's."""

SETTING_KEYS = tuple(PRESETS["qwen2-vl"])
MAX_ASPECT_RATIO = 200


@dataclasses.dataclass(frozen=True)
class QwenSettings:
    """The resolved settings, named as transformers' Qwen2-VL image processor names them."""

    min_pixels: int
    max_pixels: int
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    rescale_factor: float = 1 / 255

    @property
    def factor(self) -> int:
        """Both resized sides are multiples of this: ``patch_size * merge_size``."""
        return self.patch_size * self.merge_size


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The ``(height, width)`` Qwen2-VL resizes an image to.

    Raises:
        ValueError: the aspect ratio exceeds 200 (as transformers refuses it).
    """
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got "
            f"{max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _from_file(path: str) -> dict[str, Any]:
    data = read_json_config(path)
    found = {key: data[key] for key in SETTING_KEYS if data.get(key) is not None}
    size = data.get("size")
    if isinstance(size, dict):  # transformers 5 keeps the pixel range in size
        if size.get("shortest_edge") is not None and "min_pixels" not in found:
            found["min_pixels"] = size["shortest_edge"]
        if size.get("longest_edge") is not None and "max_pixels" not in found:
            found["max_pixels"] = size["longest_edge"]
    if data.get("rescale_factor") is not None:
        found["rescale_factor"] = data["rescale_factor"]
    return found


def resolve_qwen_settings(options: Any = None) -> QwenSettings:
    """Combine the ``options.model`` preset, ``options.path``'s file and the explicit options.

    Raises:
        ValueError, FileNotFoundError: naming the field or file at fault.
    """
    model = getattr(options, "model", "qwen2-vl") if options is not None else "qwen2-vl"
    if model not in PRESETS:
        raise ValueError(f"options.model: unknown model {model!r}; expected one of {sorted(PRESETS)}")
    merged: dict[str, Any] = dict(PRESETS[model])
    path = getattr(options, "path", None)
    if path:
        merged.update(_from_file(path))
    if options is not None:
        for key in SETTING_KEYS:
            value = getattr(options, key, None)
            if value is not None:
                merged[key] = value
    settings = QwenSettings(
        min_pixels=int(merged["min_pixels"]),
        max_pixels=int(merged["max_pixels"]),
        patch_size=int(merged["patch_size"]),
        temporal_patch_size=int(merged["temporal_patch_size"]),
        merge_size=int(merged["merge_size"]),
        image_mean=tuple(float(v) for v in merged["image_mean"]),  # type: ignore[arg-type]
        image_std=tuple(float(v) for v in merged["image_std"]),  # type: ignore[arg-type]
        rescale_factor=float(merged.get("rescale_factor", 1 / 255)),
    )
    if len(settings.image_mean) != 3 or len(settings.image_std) != 3:
        raise ValueError("image_mean and image_std: expected 3 numbers (RGB) each")
    if any(s <= 0 for s in settings.image_std):
        raise ValueError("image_std: every std must be > 0")
    if settings.min_pixels > settings.max_pixels:
        raise ValueError(
            f"min_pixels ({settings.min_pixels}) must not exceed max_pixels ({settings.max_pixels})"
        )
    return settings
