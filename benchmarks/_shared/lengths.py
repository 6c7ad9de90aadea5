"""The seeded stream of sample lengths the packing benchmarks share (index -> tokens)."""

import math
import random


def sample_lengths(count: int, seed: int) -> list[int]:
    """The seeded length stream: 60% text (lognormal ~250), 40% image (576/1,152 + ~120)."""
    rng = random.Random(seed)
    lengths = []
    for _ in range(count):
        if rng.random() < 0.6:
            lengths.append(max(1, round(rng.lognormvariate(math.log(250), 0.7))))
        else:
            image = rng.choice((576, 1152))
            lengths.append(image + max(1, round(rng.lognormvariate(math.log(120), 0.6))))
    return lengths
