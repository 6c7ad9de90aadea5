"""Write the data ``examples/llava.yaml`` reads: ``python -m energon_plugin_llava.demo_data DIR``.

``DIR/data`` gets a crude ``llava`` Energon dataset (one image of mixed size and a 1-3 turn
GPT-style conversation per sample, written by ``energon_plugins.demo.data.write_dataset``) and
``DIR/tokenizer`` the offline LLaVA demo tokenizer (Vicuna v1 template, ``<image>`` token).
A second run with the same arguments reuses what is on disk.
"""

import argparse
import pathlib


def prepare(directory, *, num_samples: int = 200, seed: int = 0) -> dict[str, str]:
    """Write (or reuse) the dataset and tokenizer under ``directory``; return their paths."""
    from energon_plugins.demo.data import write_dataset
    from energon_plugins.demo.tokenizer import save_demo_tokenizer

    root = pathlib.Path(directory).expanduser().resolve()
    kwargs = dict(kind="llava", num_samples=num_samples,
                  samples_per_shard=10, image_size=((24, 24), (96, 72)), seed=seed)
    try:
        info = write_dataset(root / "data", **kwargs)
    except FileExistsError:  # written with other arguments: replace (only if ours)
        info = write_dataset(root / "data", overwrite=True, **kwargs)
    tokenizer = root / "tokenizer"
    if not (tokenizer / "tokenizer_config.json").is_file():
        save_demo_tokenizer(tokenizer, "llava")
    return {"path": str(info.path), "tokenizer": str(tokenizer)}


def main(argv=None) -> None:
    """Command line: ``python -m energon_plugin_llava.demo_data DIR [--samples N]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="where to write data/ and tokenizer/")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    paths = prepare(args.directory, num_samples=args.samples)
    print(f"dataset:   {paths['path']}\ntokenizer: {paths['tokenizer']}")


if __name__ == "__main__":
    main()
