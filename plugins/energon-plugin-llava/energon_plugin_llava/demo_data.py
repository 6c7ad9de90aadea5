"""Write the data ``examples/llava.yaml`` reads: ``python -m energon_plugin_llava.demo_data DIR``.

``DIR/data`` gets a crude ``llava`` Energon dataset (one image of mixed size and a 1-3 turn
GPT-style conversation per sample) and ``DIR/tokenizer`` the offline LLaVA demo tokenizer
(Vicuna v1 template, ``<image>`` token). A second run with the same arguments reuses them.
"""

from energon_plugins import example_data_main, prepare_example_data

IMAGE_SIZE = ((24, 24), (96, 72))


def prepare(directory, *, num_samples: int = 200, seed: int = 0) -> dict[str, str]:
    """Write (or reuse) the dataset and tokenizer under ``directory``; return their paths."""
    return prepare_example_data(
        directory,
        kind="llava",
        tokenizer_family="llava",
        num_samples=num_samples,
        image_size=IMAGE_SIZE,
        seed=seed,
    )


main = example_data_main("llava", "llava", IMAGE_SIZE, __doc__.splitlines()[0])

if __name__ == "__main__":
    main()
