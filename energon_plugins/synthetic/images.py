"""Small synthetic images whose content can be described in words and checked.

Every image has a plain background colour and a few shapes drawn with a margin of at least
one pixel, so the pixel at (0, 0) always shows the background colour.
"""

from __future__ import annotations

import io
from typing import Any

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 180, 60),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 40),
    "purple": (150, 50, 180),
    "orange": (250, 140, 20),
    "white": (250, 250, 250),
    "black": (10, 10, 10),
}
SHAPES = ("rectangle", "circle", "triangle")


def _box(rng: Any, width: int, height: int) -> tuple[int, int, int, int]:
    """A random box inside the image that keeps a one-pixel margin."""
    x0 = int(rng.integers(1, max(2, width - 3)))
    y0 = int(rng.integers(1, max(2, height - 3)))
    x1 = int(rng.integers(x0 + 1, max(x0 + 2, width - 1)))
    y1 = int(rng.integers(y0 + 1, max(y0 + 2, height - 1)))
    return x0, y0, min(x1, width - 2), min(y1, height - 2)


def draw_scene(
    rng: Any,
    size: tuple[int, int],
    *,
    background: str,
    shapes: list[tuple[str, str]],
) -> bytes:
    """Draw `shapes` ((shape, colour) pairs) on a `background` colour; return PNG bytes.

    `rng` is a numpy Generator used for the positions only.
    """
    from PIL import Image, ImageDraw

    width, height = size
    image = Image.new("RGB", (width, height), COLORS[background])
    draw = ImageDraw.Draw(image)
    for shape, color in shapes:
        x0, y0, x1, y1 = _box(rng, width, height)
        fill = COLORS[color]
        if shape == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        elif shape == "circle":
            draw.ellipse((x0, y0, x1, y1), fill=fill)
        elif shape == "triangle":
            draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=fill)
        else:  # pragma: no cover - guarded by the callers
            raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()
