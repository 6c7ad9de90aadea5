"""A metadataset leaf's auxiliary sources (``aux:``), checked before a loader starts (issue 29).

Energon finds a wrong aux source when the loader is built (an ``AssertionError``), and a cooker
that takes no keyword argument for a source fails on every sample. The dataset-fit check
(:func:`energon_plugins.config.dataset_fit.fit_problems`, which ``validate`` and the loaders run)
names the leaf, the source and the problem. The polylithic dataset is real
(``tests/_aux_media.py``); so are the encoders.
"""

import pytest
from megatron.energon import Cooker, DefaultTaskEncoder, basic_sample_keys, stateless

from energon_plugins.config.dataset_fit import fit_problems
from energon_plugins.encoding.chat.aux_media import MediaSourceError
from energon_plugins.encoding.chat.chatml import cook_chatml
from tests._aux_media import metadataset, write_polylithic


@stateless
def cook_without_sources(sample: dict):
    """A cooker written for monolithic data: it takes no aux source."""
    return basic_sample_keys(sample)


class MonolithicCooking(DefaultTaskEncoder):
    """An encoder whose cooker reads the LLaVA format without aux sources."""

    cookers = [Cooker(cook_without_sources, has_subflavors={"format": "llava"})]


@pytest.fixture(scope="module")
def polylithic(data_root):
    root = data_root / "polylithic"
    write_polylithic(root)
    return root


@pytest.fixture(scope="module")
def encoder(vqa_dataset, tokenizer, small_clip_processor):
    """The built-in multimodal encoder (its conversation cooker takes any aux source)."""
    import energon_plugins

    module = energon_plugins.EnergonMultiModalDataModule(
        path=str(vqa_dataset.path), tokenizer=tokenizer, image_processor=small_clip_processor, num_workers=0
    )
    return module.task_encoder


def test_a_local_media_folder_fits_the_built_in_encoder(polylithic, encoder):
    blend = metadataset(polylithic / "good.yaml", "conversations", {"media": "filesystem://media"})
    assert fit_problems(encoder, blend, "train") == []


BAD = [
    pytest.param(
        {"media": "filesystem://no-such-folder"},
        None,
        ["'media'", "no-such-folder", "does not exist"],
        id="no-folder",
    ),
    pytest.param(
        {"media": "media"},
        None,
        ["not a prepared Energon dataset", "index.sqlite", "filesystem://"],
        id="folder-as-dataset",
    ),
    pytest.param(
        {"media": "s3://bucket/images"}, None, ["not an aux source Energon reads", "msc://"], id="s3-url"
    ),
    pytest.param(
        {"media": "filesystem://media"},
        "monolithic",
        ["cook_without_sources", "no keyword argument media"],
        id="cooker-without-source",
    ),
    pytest.param(
        {"media": "filesystem://media"}, "typed", ["only for crude datasets", "VQASample"], id="typed-leaf"
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(("aux", "case", "expected"), BAD)
def test_a_bad_aux_source_is_named_with_its_leaf(polylithic, encoder, vqa_dataset, aux, case, expected):
    leaf = str(vqa_dataset.path) if case == "typed" else "conversations"
    blend = metadataset(polylithic / "bad.yaml", leaf, aux)
    reader = MonolithicCooking() if case == "monolithic" else encoder
    problems = fit_problems(reader, blend, "train")
    assert problems, "the bad aux source was accepted"
    text = "; ".join(problems)
    for name in ("(train split of", str(blend), *expected):
        assert name in text, (name, text)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        pytest.param({}, "declares no aux source to read them from", id="none-declared"),
        pytest.param({"left": object(), "right": object()}, "declared: left, right", id="two-without-media"),
    ],
)
def test_a_sample_naming_its_image_needs_one_source(sources, expected):
    sample = {
        "__key__": "s-1",
        "json": {"image": "s-1.png", "conversations": [{"from": "gpt", "value": "hi"}]},
    }
    with pytest.raises(MediaSourceError, match=expected) as info:
        cook_chatml(sample, **sources)
    assert "'s-1'" in str(info.value)
