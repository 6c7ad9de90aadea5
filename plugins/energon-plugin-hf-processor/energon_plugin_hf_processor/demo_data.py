"""Write what ``examples/hf-processor.yaml`` and ``examples/video.yaml`` read.

``python -m energon_plugin_hf_processor.demo_data DIR [--video]``: ``DIR/data`` gets a crude
``chatml`` Energon dataset and ``DIR/processor`` a tiny offline processor of a real family
(``--family``, default ``qwen2.5-vl``: its chat template and special tokens, a small tokenizer;
see :mod:`energon_plugin_hf_processor.tiny`). Without ``--video``: one to three images of mixed
sizes and a 1-3 turn GPT-style conversation per sample. With ``--video``: one or two real MP4
/ WebM files per sample (encoded with PyAV, 1-3 s at 8 fps), an image beside every third, and
``<video>`` tags in the conversation. A second run reuses both.
"""

import pathlib
from typing import Any

IMAGE_SIZE = ((24, 24), (120, 90))
VIDEO_SIZES = ((48, 32), (64, 48), (32, 32))


def write_video_dataset(path: Any, *, num_samples: int = 40, seed: int = 0) -> pathlib.Path:
    """A crude ``chatml`` dataset of video conversations (one or two videos, sometimes an
    image), prepared with Energon's own prepare API; reused when already written."""
    import numpy as np
    from PIL import Image

    from energon_plugins.testing import encode_video, video_frames, write_crude_dataset

    root = pathlib.Path(path)
    marker = root / ".nv-meta" / "demo_video.json"
    wanted = f'{{"num_samples": {num_samples}, "seed": {seed}}}'
    if marker.is_file() and marker.read_text() == wanted:
        return root
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(num_samples):
        videos = []
        for v in range(1 + int(i % 4 == 3)):
            size = VIDEO_SIZES[int(rng.integers(len(VIDEO_SIZES)))]
            container = "webm" if (i + v) % 5 == 4 else "mp4"
            frames = int(rng.integers(8, 25))
            videos.append(
                (container, encode_video(video_frames(frames, size, seed=i), 8, container=container, gop=8))
            )
        images = []
        if i % 3 == 2:
            images.append(Image.fromarray(rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)))
        tags = "<image>\n" * len(images) + "<video>\n" * len(videos)
        conversation = [
            {"from": "human", "value": f"{tags}What moves in clip {i}?"},
            {"from": "gpt", "value": f"A white bar, {len(videos)} time(s)."},
        ]
        if i % 2:
            conversation += [
                {"from": "human", "value": "Which way?"},
                {"from": "gpt", "value": "Left to right."},
            ]
        samples.append((f"video-{i:04d}", images, conversation, videos))
    if root.exists():
        import shutil

        shutil.rmtree(root)
    write_crude_dataset(
        root, samples, fmt="chatml", samples_per_shard=5, split_ratio=(("train", 0.9), ("val", 0.1))
    )
    marker.write_text(wanted)
    return root


def prepare(
    directory: Any, *, family: str = "qwen2.5-vl", num_samples: int = 200, seed: int = 0, video: bool = False
) -> dict[str, str]:
    """Write (or reuse) the dataset and the processor under ``directory``; return their paths."""
    from energon_plugin_hf_processor.tiny import save_tiny_processor

    root = pathlib.Path(directory).expanduser().resolve()
    if video:
        data = write_video_dataset(root / "data", num_samples=num_samples, seed=seed)
    else:
        from energon_plugins.testing import write_dataset

        arguments = dict(
            kind="chatml", num_samples=num_samples, samples_per_shard=10, image_size=IMAGE_SIZE, seed=seed
        )
        try:
            info = write_dataset(root / "data", **arguments)
        except FileExistsError:  # other arguments: replace (write_dataset checks it is ours)
            info = write_dataset(root / "data", overwrite=True, **arguments)
        data = info.path
    processor = root / "processor"
    if (
        not (processor / "tiny_processor.json").is_file()
        or family not in (processor / "tiny_processor.json").read_text()
    ):
        save_tiny_processor(family, processor)
    return {"path": str(data), "processor": str(processor)}


def main(argv: list[str] | None = None) -> None:
    """``python -m energon_plugin_hf_processor.demo_data DIR [--family F] [--samples N] [--video]``."""
    import argparse

    from energon_plugin_hf_processor.tiny import TINY_FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="where to write data/ and processor/")
    parser.add_argument("--family", choices=TINY_FAMILIES, default="qwen2.5-vl")
    parser.add_argument(
        "--samples", type=int, default=None, help="samples to write (200 with images, 40 with videos)"
    )
    parser.add_argument("--video", action="store_true", help="video conversations")
    args = parser.parse_args(argv)
    samples = args.samples if args.samples is not None else (40 if args.video else 200)
    paths = prepare(args.directory, family=args.family, num_samples=samples, video=args.video)
    print(f"dataset:   {paths['path']}\nprocessor: {paths['processor']}")


if __name__ == "__main__":
    main()
