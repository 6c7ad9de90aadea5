"""Natural-looking synthetic images for tests and benchmarks (numpy only; no files, no network)."""

import numpy as np


def natural_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A ``(height, width, 3)`` uint8 image: smooth gradients, a few shapes and mild noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    y /= max(height - 1, 1)
    x /= max(width - 1, 1)
    img = np.empty((height, width, 3), np.float32)
    for c in range(3):
        a, b, phase = rng.uniform(-1, 1, 3)
        img[..., c] = 128 + 90 * (a * x + b * y) / 2 + 30 * np.sin(6.28 * (x * a + y * b) + phase * 3)
    for _ in range(int(rng.integers(2, 6))):
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        cy, cx = rng.uniform(0, 1, 2)
        if rng.random() < 0.5:
            r = rng.uniform(0.05, 0.3)
            mask = (y - cy) ** 2 + ((x - cx) * width / height) ** 2 < r * r
        else:
            hh, ww = rng.uniform(0.05, 0.4, 2)
            mask = (abs(y - cy) < hh / 2) & (abs(x - cx) < ww / 2)
        img[mask] = 0.3 * img[mask] + 0.7 * colour
    img += rng.normal(0, 6, img.shape).astype(np.float32)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


def mixed_size_images(n: int, seed: int = 0, min_side: int = 200, max_side: int = 640) -> list[np.ndarray]:
    """``n`` natural images with random sizes in ``[min_side, max_side]`` (seeded)."""
    rng = np.random.default_rng(seed)
    return [
        natural_image(
            rng, int(rng.integers(min_side, max_side + 1)), int(rng.integers(min_side, max_side + 1))
        )
        for _ in range(n)
    ]
