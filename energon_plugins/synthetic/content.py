"""Seeded sample content: scenes of coloured shapes and the questions, captions, conversations
and interleaved sequences that describe them, as the tar parts of one sample.

Every draw comes from the numpy Generator the caller passes, in a fixed order, so the same
seed gives the same samples (and the same shard bytes).
"""

from __future__ import annotations

import json

from energon_plugins.synthetic.images import COLORS, SHAPES, draw_scene

_PLURAL = {"rectangle": "rectangles", "circle": "circles", "triangle": "triangles"}


def _pick(rng, items):
    """One of `items`, drawn from `rng`."""
    return items[int(rng.integers(len(items)))]


def _size(rng, sizes) -> tuple[int, int]:
    """An image size drawn from `rng` within ``((min_w, min_h), (max_w, max_h))``."""
    (lw, lh), (hw, hh) = sizes
    return int(rng.integers(lw, hw + 1)), int(rng.integers(lh, hh + 1))


def _scene(rng, sizes, *, max_shapes: int = 4, shape: str | None = None):
    """A random scene description plus its PNG bytes."""
    names = list(COLORS)
    background = _pick(rng, names)
    fg = [c for c in names if c != background]
    count = int(rng.integers(1, max_shapes + 1))
    kind = shape or _pick(rng, SHAPES)
    color = _pick(rng, fg)
    shapes = [(kind, color)] * count
    size = _size(rng, sizes)
    png = draw_scene(rng, size, background=background, shapes=shapes)
    scene = {
        "size": list(size),
        "background": background,
        "background_rgb": list(COLORS[background]),
        "shape": kind,
        "color": color,
        "count": count,
    }
    return scene, png


def _qa(rng, scene) -> tuple[str, str]:
    """A question about a scene and its answer."""
    choice = int(rng.integers(3))
    if choice == 0:
        return f"How many {_PLURAL[scene['shape']]} are there?", str(scene["count"])
    if choice == 1:
        return f"What color is the {scene['shape']}?", scene["color"]
    return "What color is the background?", scene["background"]


def _caption(scene) -> str:
    """A caption that says what a scene shows."""
    if scene["count"] == 1:
        return f"A {scene['color']} {scene['shape']} on a {scene['background']} background."
    return (
        f"{scene['count']} {scene['color']} {_PLURAL[scene['shape']]} on a {scene['background']} background."
    )


def _conversation(rng, scenes: list[dict], *, image_token: str = "<image>") -> list[dict]:
    """1-3 human/gpt turns; the image tags go into the first human turns, one per image."""
    turns = max(int(rng.integers(1, 4)), 1)
    pending = list(range(len(scenes)))
    conversations = []
    for turn in range(turns):
        target = scenes[int(rng.integers(len(scenes)))]
        question, answer = _qa(rng, target)
        if turn == 0 and len(scenes) > 1:
            # all image tags up front, one per image
            tags = "".join(f"{image_token}\n" for _ in pending)
            pending = []
            question = tags + question
        elif turn == 0:
            question = f"{image_token}\n{question}"
            pending = []
        conversations.append({"from": "human", "value": question})
        conversations.append({"from": "gpt", "value": f"{answer[0].upper()}{answer[1:]}."})
    return conversations


def make_sample(kind: str, rng, sizes) -> tuple[dict, dict[str, bytes]]:
    """Generate one sample of `kind` from `rng` with image sizes in `sizes` ((min), (max)).

    Returns ``(record, parts)``: the source record that :class:`DatasetInfo` keeps (text
    fields, image sizes, scenes) and the tar parts of the sample, without ``__key__``.
    """
    if kind == "vqa":
        scene, png = _scene(rng, sizes, shape="rectangle" if rng.integers(2) else None)
        question, answer = _qa(rng, scene)
        record = {"context": question, "answers": [answer], "image_sizes": [scene["size"]], "scenes": [scene]}
        meta = {"question": question, "answers": [answer], "scene": scene}
        return record, {"png": png, "json": json.dumps(meta).encode()}
    if kind == "captioning":
        scene, png = _scene(rng, sizes, max_shapes=3)
        caption = _caption(scene)
        record = {"caption": caption, "image_sizes": [scene["size"]], "scenes": [scene]}
        return record, {"png": png, "json": json.dumps({"caption": caption, "scene": scene}).encode()}
    if kind == "interleaved":
        n_images = int(rng.integers(1, 3))
        parts: dict[str, bytes] = {}
        sequence: list[dict] = []
        scenes = []
        for i in range(n_images):
            scene, png = _scene(rng, sizes, max_shapes=3)
            scenes.append(scene)
            parts[f"{i}.png"] = png
            sequence.append({"text": f"Picture {i + 1}:"})
            sequence.append({"image": f"{i}.png"})
            sequence.append({"text": _caption(scene)})
        record = {"sequence": sequence, "image_sizes": [s["size"] for s in scenes], "scenes": scenes}
        parts["json"] = json.dumps({"sequence": sequence}).encode()
        return record, parts
    if kind == "llava":
        scene, png = _scene(rng, sizes)
        conversations = _conversation(rng, [scene])
        record = {"conversations": conversations, "image_sizes": [scene["size"]], "scenes": [scene]}
        return record, {"png": png, "json": json.dumps({"conversations": conversations}).encode()}
    if kind == "chatml":
        n_images = int(rng.integers(1, 4))
        parts = {}
        scenes = []
        for i in range(n_images):
            scene, png = _scene(rng, sizes)
            scenes.append(scene)
            parts[f"{i}.png"] = png
        conversations = _conversation(rng, scenes)
        record = {
            "conversations": conversations,
            "image_sizes": [s["size"] for s in scenes],
            "scenes": scenes,
        }
        parts["json"] = json.dumps({"conversations": conversations}).encode()
        return record, parts
    raise ValueError(f"kind: unknown dataset kind {kind!r}")  # pragma: no cover
