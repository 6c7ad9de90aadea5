"""PP-Chart2Table: one image per user turn, the rest skipped and counted (or an error).

Its chat template writes one image's 256 ``<imgpad>`` in every user turn whatever the turn
holds, and its processor raises without images (``FamilySpec.image_per_user_turn``). Of the
golden conversations, the text-only ones are skipped as ``no_image``, the two-image one-turn
and the one-image two-turn ones as ``image_count``; under ``on_error: raise`` an error names
the sample, the reason and the family. The kept ones are golden-tested in test_golden.py.
"""

import pytest
from energon_plugin_hf_processor.families import families

FAMILY = "pp-chart2table"
SKIPPED = {"text": "no_image", "twotext": "no_image", "multi": "image_count", "turns": "image_count"}

pytestmark = pytest.mark.bad_input


def test_samples_without_one_image_per_user_turn_are_skipped_and_counted(
    processor_dirs, conversation_data, make_datamodule, golden
):
    from transformers import AutoProcessor

    path, originals = conversation_data
    spec = families()[FAMILY]
    assert spec.image_per_user_turn
    taken = golden.taken(spec, originals)
    assert set(originals) - taken == set(SKIPPED)
    tok = AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True).tokenizer
    dm = make_datamodule(path, processor_dirs[FAMILY], tok, packed=False)
    loader = dm.train_dataloader()
    # Three batches of the two kept samples: past a whole pass over all six, so every skipped
    # sample was met at least once.
    seen = {k for _ in range(3) for key in next(loader).__key__ for k in key.split(",")}
    assert seen == taken
    counts = dm.skip_counts()
    assert set(counts) == {"no_image", "image_count"}, counts
    assert counts["no_image"] >= 2 and counts["image_count"] >= 2, counts


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("text", r"\(no_image\): sample 'text': no image; family 'pp-chart2table' writes one image"),
        ("multi", r"\(image_count\): sample 'multi': 2 images in 1 user turns; family 'pp-chart2table'"),
        ("turns", r"\(image_count\): sample 'turns': 1 images in 2 user turns; family 'pp-chart2table'"),
    ],
)
def test_under_on_error_raise_the_error_names_the_sample_and_the_family(
    key, expected, tmp_path, processor_dirs, conversation_data, make_datamodule, every_batch
):
    from transformers import AutoProcessor

    from energon_plugins.testing import write_crude_dataset

    _, originals = conversation_data
    images, conversation = originals[key]
    write_crude_dataset(tmp_path, [(key, images, conversation)], fmt="chatml", split_ratio=(("train", 1.0),))
    tok = AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True).tokenizer
    raising = make_datamodule(tmp_path, processor_dirs[FAMILY], tok, packed=False, on_error="raise")
    with pytest.raises(Exception, match=expected):
        for _ in every_batch(raising, [key]):
            pass


def test_running_text_is_refused_and_other_families_take_any_count():
    """An interleaved sample (running text, no user turns) cannot be written by the template;
    a family without ``image_per_user_turn`` never refuses (today's behaviour)."""
    spec = families()[FAMILY]
    turns = [{"role": "user", "content": []}, {"role": "assistant", "content": "A | 1"}]
    assert spec.image_turn_problem(turns, 1) is None
    assert spec.image_turn_problem(None, 1)[0] == "image_count"
    assert spec.image_turn_problem(None, 0)[0] == "no_image"
    assert families()["qwen2-vl"].image_turn_problem(turns, 0) is None
    assert families()["qwen2-vl"].image_turn_problem(None, 3) is None
