"""``energon-plugins preview`` shows each family's samples with their images and label spans."""

import pytest

from energon_plugins.cli.preview_cmd import collect_rows
from energon_plugins.cli.preview_html import render_page


@pytest.mark.parametrize("family", ["qwen2.5-vl", "llava-next", "idefics3", "gemma3", "internvl"])
def test_preview_draws_every_image_and_marks_the_answers(
    family, processor_dirs, conversation_data, make_datamodule
):
    from transformers import AutoProcessor

    path, originals = conversation_data
    tok = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True).tokenizer
    rows = collect_rows(make_datamodule(path, processor_dirs[family], tok, packed=False), 6)
    keys = [row["label"] for row in rows]
    assert len(keys) == 6
    for row in rows:
        assert len(row["images"]) == row["num_images"], (family, row["note"])
        assert not row["note"]
        answers = "".join(s.text for spans in row["spans"] for s in spans if s.loss)
        assert answers.strip()
    page = render_page("preview", rows)
    assert page.count("data:image/png;base64,") == sum(r["num_images"] for r in rows) > 0
