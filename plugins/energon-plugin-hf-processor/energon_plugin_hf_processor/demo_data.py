"""Write what ``examples/hf-processor.yaml`` reads: ``python -m energon_plugin_hf_processor.demo_data DIR``.

``DIR/data`` gets a crude ``chatml`` Energon dataset (one to three images of mixed sizes and a
1-3 turn GPT-style conversation per sample) and ``DIR/processor`` a tiny offline processor of
a real family (``--family``, default ``qwen2.5-vl``: its chat template and special tokens, a
small tokenizer; see :mod:`energon_plugin_hf_processor.tiny`). A second run reuses both.
"""

import pathlib
from typing import Any

IMAGE_SIZE = ((24, 24), (120, 90))


def prepare(directory: Any, *, family: str = "qwen2.5-vl", num_samples: int = 200,
            seed: int = 0) -> dict[str, str]:
    """Write (or reuse) the dataset and the processor under ``directory``; return their paths."""
    from energon_plugins.demo.data import write_dataset

    from energon_plugin_hf_processor.tiny import save_tiny_processor

    root = pathlib.Path(directory).expanduser().resolve()
    arguments = dict(kind="chatml", num_samples=num_samples, samples_per_shard=10,
                     image_size=IMAGE_SIZE, seed=seed)
    try:
        info = write_dataset(root / "data", **arguments)
    except FileExistsError:  # written with other arguments: replace (write_dataset checks it is ours)
        info = write_dataset(root / "data", overwrite=True, **arguments)
    processor = root / "processor"
    if not (processor / "tiny_processor.json").is_file() or family not in (
        processor / "tiny_processor.json"
    ).read_text():
        save_tiny_processor(family, processor)
    return {"path": str(info.path), "processor": str(processor)}


def main(argv: list[str] | None = None) -> None:
    """``python -m energon_plugin_hf_processor.demo_data DIR [--family F] [--samples N]``."""
    import argparse

    from energon_plugin_hf_processor.tiny import TINY_FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="where to write data/ and processor/")
    parser.add_argument("--family", choices=TINY_FAMILIES, default="qwen2.5-vl")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    paths = prepare(args.directory, family=args.family, num_samples=args.samples)
    print(f"dataset:   {paths['path']}\nprocessor: {paths['processor']}")


if __name__ == "__main__":
    main()
