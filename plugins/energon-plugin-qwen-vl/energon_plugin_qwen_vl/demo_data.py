"""Write the data ``examples/qwen2-vl.yaml`` reads: ``python -m energon_plugin_qwen_vl.demo_data DIR``.

``DIR/data`` gets a crude ``chatml`` Energon dataset (one to three images of mixed sizes and a
1-3 turn GPT-style conversation per sample) and ``DIR/tokenizer`` the offline Qwen2 demo
tokenizer (ChatML, vision tokens). A second run with the same arguments reuses them.
"""

from energon_plugins import example_data_main, prepare_example_data

IMAGE_SIZE = ((24, 24), (224, 168))


def prepare(directory, *, num_samples: int = 200, seed: int = 0) -> dict[str, str]:
    """Write (or reuse) the dataset and tokenizer under ``directory``; return their paths."""
    return prepare_example_data(
        directory,
        kind="chatml",
        tokenizer_family="qwen2",
        num_samples=num_samples,
        image_size=IMAGE_SIZE,
        seed=seed,
    )


main = example_data_main("chatml", "qwen2", IMAGE_SIZE, __doc__.splitlines()[0])

if __name__ == "__main__":
    main()
