"""``energon-plugins preview`` shows each family's samples with their images and label spans."""

import pytest

from energon_plugins.testing import collect_rows, render_page


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


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl", "llava-onevision"])
def test_preview_draws_the_sampled_frames_and_the_video_token_span(family, processor_dirs, video_data):
    """Each video: a strip of its kept frames (put back from the processor's layout) and the
    positions of its tokens; the run of video tokens is collapsed in the text."""
    import numpy as np
    import torch
    from torchvision.transforms.v2 import functional as F
    from transformers import AutoProcessor

    import energon_plugins
    from energon_plugins import frame_indices

    path, originals = video_data
    tok = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True).tokenizer
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=4096,
        micro_batch_size=1,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {
                "processor": str(processor_dirs[family]),
                "padding": "longest",
                "video": {"num_frames": 4},
            },
        },
        batch_format=None,
    )  # what preview reads
    rows = collect_rows(dm, 4)
    drawn = 0
    for row in rows:
        key = row["label"]
        videos = row["videos"]
        for video in videos:
            assert len(video["frames"]) == 4 and video["tokens"] > 0
            start, end = video["span"]
            assert 0 <= start < end <= row["width"]
        runs = [s for spans in row["spans"] for s in spans if s.kind == "video"]
        assert sum(s.count for s in runs) == sum(v["tokens"] for v in videos), key
        drawn += len(videos)
    assert drawn >= 3
    # The first drawn frame of the first video is that frame of the file, resized.
    from energon_plugins.testing import render_page

    page = render_page("preview", rows)
    assert page.count("class='strip'") == drawn
    first = next(r for r in rows if r["key"] == "clip")
    import base64
    import io

    from PIL import Image

    frame = np.asarray(Image.open(io.BytesIO(base64.b64decode(first["videos"][0]["frames"][0]))))
    every = originals["clip"]["videos"][0][2]
    index = frame_indices(len(every), 4)[0]
    source = torch.from_numpy(every[index]).permute(2, 0, 1)
    resized = F.resize(source, list(frame.shape[:2]), antialias=True).permute(1, 2, 0).numpy()
    assert np.abs(resized.astype(int) - frame.astype(int)).mean() < 12
