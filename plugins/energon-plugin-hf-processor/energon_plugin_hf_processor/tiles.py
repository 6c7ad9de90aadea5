"""Fewer tiles per image for a sample that does not fit ``seq_length`` (Megatron-LM's rule).

A processor whose image processor tiles (InternVL's ``GotOcr2ImageProcessor`` with
``crop_to_patches``: up to ``max_patches`` tiles per image) can be called again with a lower
``max_patches``. With the option ``degrade_tiles``, the encoder tries the maxima of
:func:`tile_limits` in turn and keeps the first encoding that fits.
"""

from __future__ import annotations

from typing import Any

from energon_plugins import ConfigError

#: The image-processor attribute (and call keyword) of the maximum tiles per image.
MAX_TILES = "max_patches"


def tile_limits(image_processor: Any, degrade: bool, steps: dict[int, int]) -> list[int]:
    """The maxima of tiles per image to try in turn: the processor's own, then each step of
    ``steps`` down to 1; empty when ``degrade`` is off.

    Raises:
        ConfigError: ``degrade`` on an image processor that does not tile, or whose maximum is
            not a key of ``steps`` (the option is named).
    """
    if not degrade:
        return []
    name = type(image_processor).__name__
    if not getattr(image_processor, "crop_to_patches", False) or not isinstance(
        getattr(image_processor, MAX_TILES, None), int
    ):
        raise ConfigError(
            f"task_encoder.options.degrade_tiles: {name} does not tile (it needs {MAX_TILES} and "
            "crop_to_patches: true, as InternVL's GotOcr2ImageProcessor)"
        )
    limits = [int(getattr(image_processor, MAX_TILES))]
    if limits[0] > 1 and limits[0] not in steps:
        raise ConfigError(
            f"task_encoder.options.tile_degradation: {name} takes up to {limits[0]} tiles per "
            f"image, which is not a key of {steps}"
        )
    while limits[-1] > 1 and limits[-1] in steps:
        limits.append(steps[limits[-1]])
    return limits
