"""Resolve processor settings: transformers defaults, then a preprocessor_config.json, then options.

Import-light (json and dataclasses only): the file is read as plain JSON, no transformers.
"""

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from energon_plugin_fast_image.options import resample_name

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_STANDARD_MEAN = (0.5, 0.5, 0.5)
IMAGENET_STANDARD_STD = (0.5, 0.5, 0.5)

# The class attributes of transformers' CLIPImageProcessor / SiglipImageProcessor (5.x).
DEFAULTS: dict[str, dict[str, Any]] = {
    "clip": {
        "do_resize": True,
        "size": {"shortest_edge": 224},
        "resample": "bicubic",
        "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD,
    },
    "siglip": {
        "do_resize": True,
        "size": {"height": 224, "width": 224},
        "resample": "bicubic",
        "do_center_crop": False,
        "crop_size": None,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": IMAGENET_STANDARD_MEAN,
        "image_std": IMAGENET_STANDARD_STD,
    },
}

SETTING_KEYS = tuple(DEFAULTS["clip"])
CONFIG_NAME = "preprocessor_config.json"


@dataclasses.dataclass(frozen=True)
class ProcessorSettings:
    """The resolved settings of one processor, named as transformers names them."""

    do_resize: bool
    size: dict[str, int]
    resample: str
    do_center_crop: bool
    crop_size: dict[str, int] | None
    do_rescale: bool
    rescale_factor: float
    do_normalize: bool
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]


def _normalize_size(value: Any, family: str, where: str, *, crop: bool) -> dict[str, int] | None:
    """Turn an int or a dict into ``{shortest_edge}`` or ``{height, width}``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected an int or a mapping, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{where}: must be positive, got {value}")
        if crop or family == "siglip":
            return {"height": value, "width": value}
        return {"shortest_edge": value}
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return {"height": int(value[0]), "width": int(value[1])}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected an int or a mapping, got {value!r}")
    keys = {k for k, v in value.items() if v is not None}
    if keys == {"shortest_edge"} and not crop:
        out = {"shortest_edge": value["shortest_edge"]}
    elif keys == {"height", "width"}:
        out = {"height": value["height"], "width": value["width"]}
    else:
        wanted = "{height, width}" if crop else "{shortest_edge} or {height, width}"
        raise ValueError(f"{where}: expected keys {wanted}, got {sorted(keys)}")
    for key, v in out.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}.{key}: must be a positive integer, got {v!r}")
    return out


def _triple(value: Any, where: str) -> tuple[float, float, float]:
    if isinstance(value, (int, float)):
        value = [value] * 3
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise ValueError(f"{where}: expected 3 numbers (RGB), got {value!r}")
    return tuple(float(v) for v in value)  # type: ignore[return-value]


def read_json_config(path: str) -> dict[str, Any]:
    """The JSON object in ``path/preprocessor_config.json`` (or in the JSON file ``path``).

    Raises:
        FileNotFoundError, ValueError: naming the directory or file.
    """
    file = path if os.path.isfile(path) else os.path.join(path, CONFIG_NAME)
    if not os.path.isdir(path) and not os.path.isfile(path):
        raise FileNotFoundError(f"options.path: {path!r} is not a directory")
    if not os.path.isfile(file):
        raise FileNotFoundError(f"options.path: {file!r} does not exist")
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a JSON object, got {type(data).__name__}")
    return data


def read_preprocessor_config(path: str) -> dict[str, Any]:
    """The CLIP/SigLIP settings in ``path``'s preprocessor_config.json (other keys ignored).

    Raises:
        FileNotFoundError, ValueError: naming the directory or file.
    """
    data = read_json_config(path)
    return {key: data[key] for key in SETTING_KEYS if key in data}


def resolve_settings(family: str, options: Any = None) -> ProcessorSettings:
    """Combine the ``family`` defaults, ``options.path``'s file and the explicit ``options``.

    ``family`` is ``"clip"`` or ``"siglip"``; ``options`` a validated options model or None.

    Raises:
        ValueError, FileNotFoundError: naming the field or file at fault.
    """
    if family not in DEFAULTS:
        raise ValueError(f"unknown processor family {family!r}; expected one of {sorted(DEFAULTS)}")
    merged: dict[str, Any] = dict(DEFAULTS[family])
    sources = {key: "default" for key in merged}
    path = getattr(options, "path", None)
    if path:
        from_file = read_preprocessor_config(path)
        merged.update(from_file)
        sources.update({key: os.path.join(path, CONFIG_NAME) for key in from_file})
    if options is not None:
        for key in SETTING_KEYS:
            value = getattr(options, key, None)
            if value is not None:
                merged[key] = value
                sources[key] = "options"

    def where(key: str) -> str:
        return f"{sources[key]}: {key}" if sources[key] != "options" else f"options.{key}"

    settings = ProcessorSettings(
        do_resize=bool(merged["do_resize"]),
        size=_normalize_size(merged["size"], family, where("size"), crop=False),
        resample=resample_name(merged["resample"], where("resample")),
        do_center_crop=bool(merged["do_center_crop"]),
        crop_size=_normalize_size(merged["crop_size"], family, where("crop_size"), crop=True),
        do_rescale=bool(merged["do_rescale"]),
        rescale_factor=float(merged["rescale_factor"]),
        do_normalize=bool(merged["do_normalize"]),
        image_mean=_triple(merged["image_mean"], where("image_mean")),
        image_std=_triple(merged["image_std"], where("image_std")),
    )
    if settings.do_resize and settings.size is None:
        raise ValueError(f"{where('size')}: do_resize is true but no size is set")
    if settings.do_center_crop and settings.crop_size is None:
        raise ValueError(f"{where('crop_size')}: do_center_crop is true but no crop_size is set")
    if any(s <= 0 for s in settings.image_std):
        raise ValueError(f"{where('image_std')}: every std must be > 0")
    if settings.rescale_factor <= 0:
        raise ValueError(f"{where('rescale_factor')}: must be > 0")
    return settings
