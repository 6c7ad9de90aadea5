"""Data for example configs: a generated dataset and a saved offline tokenizer in one folder."""

import pathlib
from typing import Any


def prepare_example_data(
    directory: Any,
    *,
    kind: str,
    tokenizer_family: str,
    num_samples: int = 200,
    image_size: Any = (32, 32),
    seed: int = 0,
) -> dict[str, str]:
    """Write (or reuse) ``DIR/data`` and ``DIR/tokenizer``; return their paths.

    ``kind`` is a :func:`energon_plugins.synthetic.write_dataset` kind, ``tokenizer_family`` a
    :func:`energon_plugins.synthetic.build_demo_tokenizer` family. A dataset that this
    module wrote with other arguments is replaced; a second run with the same ones reuses it.
    """
    from energon_plugins.synthetic import save_demo_tokenizer, write_dataset

    root = pathlib.Path(directory).expanduser().resolve()
    arguments = dict(
        kind=kind, num_samples=num_samples, samples_per_shard=10, image_size=image_size, seed=seed
    )
    try:
        info = write_dataset(root / "data", **arguments)
    except FileExistsError:  # written with other arguments: replace (write_dataset checks it is ours)
        info = write_dataset(root / "data", overwrite=True, **arguments)
    tokenizer = root / "tokenizer"
    if not (tokenizer / "tokenizer_config.json").is_file():
        save_demo_tokenizer(tokenizer, tokenizer_family)
    return {"path": str(info.path), "tokenizer": str(tokenizer)}


def example_data_main(kind: str, tokenizer_family: str, image_size: Any, description: str) -> Any:
    """A ``main(argv=None)`` for a plugin's ``python -m <plugin>.demo_data DIR [--samples N]``."""

    def main(argv: list[str] | None = None) -> None:
        import argparse

        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("directory", help="where to write data/ and tokenizer/")
        parser.add_argument("--samples", type=int, default=200)
        args = parser.parse_args(argv)
        paths = prepare_example_data(
            args.directory,
            kind=kind,
            tokenizer_family=tokenizer_family,
            num_samples=args.samples,
            image_size=image_size,
        )
        print(f"dataset:   {paths['path']}\ntokenizer: {paths['tokenizer']}")

    return main
