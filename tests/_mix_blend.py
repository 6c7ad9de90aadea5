"""A real three-leaf blend with nested weights, for the tests of the realised mix.

``mix-outer.yaml`` blends ``vqa`` (weight 2) with the nested ``nested/mix-inner.yaml`` (weight
2), which blends ``../captioning`` (weight 1) and ``../interleaved/`` (weight 3): the leaves'
configured shares are 2/4 = 50%, 2/4 x 1/4 = 12.5% and 2/4 x 3/4 = 37.5%. (Flat weights would
give a third each; weights multiplied without normalising each level 1 : 1 x 2 : 3 x 2 = 20% /
20% / 60%: every wrong reading is far from the right one.) The sources are named by their
``path`` as the YAMLs write them.
"""

from pathlib import Path

CONFIGURED = {"vqa": 0.5, "../captioning": 0.125, "../interleaved/": 0.375}
"""Each leaf's configured share, by its source name (its ``path`` as written)."""

HEADER = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"


def write_nested_blend(data_root: Path) -> Path:
    """Write the two metadatasets beside ``data_root``'s ``vqa``, ``captioning`` and
    ``interleaved`` datasets (the session fixtures); return the outer one."""
    inner = data_root / "nested" / "mix-inner.yaml"
    inner.parent.mkdir(exist_ok=True)
    inner.write_text(
        HEADER + "  train:\n    blend:\n"
        "      - weight: 1\n        path: ../captioning\n"
        "      - weight: 3\n        path: ../interleaved/\n"
    )
    outer = data_root / "mix-outer.yaml"
    outer.write_text(
        HEADER + "  train:\n    blend:\n"
        "      - weight: 2\n        path: vqa\n"
        "      - weight: 2\n        path: nested/mix-inner.yaml\n"
    )
    return outer
