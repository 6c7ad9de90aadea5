"""Videos through the ``qwen2-vl`` task encoder, on a real Energon dataset of MP4 / WebM files.

Every ``<video>`` tag becomes ``<|vision_start|>`` + n x ``<|video_pad|>`` + ``<|vision_end|>``
with ``n = t * h * w / 4`` from transformers' ``Qwen2VLVideoProcessor`` run on the same frames
(decoded by plain PyAV, every frame, then the kept ones picked); ``pixel_values_videos`` and
``video_grid_thw`` are that processor's. The budget gives up frames before a skip, and the
frames are drawn by ``preview``.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

import energon_plugins
from energon_plugins import frame_indices
from energon_plugins.testing import (
    build_demo_tokenizer,
    decode_every_frame,
    encode_video,
    video_frames,
    write_crude_dataset,
    write_vidqa_dataset,
)

IGNORE = -100
SYSTEM = "You are a helpful assistant."
VIDEO = {"num_frames": 4, "min_pixels": 784, "max_pixels": 3136}
# key: (videos as (container, frames, fps, (w, h)), image sizes, GPT-style turns)
SAMPLES = {
    "clip": ([("mp4", 16, 8, (64, 64))], [], [("human", "<video>\nWhat happens?"), ("gpt", "A bar moves.")]),
    "clip+image": (
        [("webm", 12, 6, (64, 48))],
        [(56, 56)],
        [("human", "<image><video>Same?"), ("gpt", "No.")],
    ),
    "two-clips": (
        [("mp4", 10, 5, (32, 32)), ("mp4", 8, 4, (48, 32))],
        [],
        [
            ("human", "<video><video>Which is longer?"),
            ("gpt", "The first."),
            ("human", "By how much?"),
            ("gpt", "Half a second."),
        ],
    ),
}


@pytest.fixture(scope="module")
def tok():
    return build_demo_tokenizer("qwen2")


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("qwen-videos")
    originals, samples = {}, []
    for n, (key, (clips, sizes, turns)) in enumerate(SAMPLES.items()):
        encoded = [
            (c, encode_video(video_frames(f, size, seed=n), fps, container=c, gop=4))
            for c, f, fps, size in clips
        ]
        images = [
            Image.fromarray(np.random.default_rng(n).integers(0, 256, (h, w, 3), np.uint8)) for w, h in sizes
        ]
        originals[key] = {
            "videos": [np.stack(decode_every_frame(d)) for _, d in encoded],
            "images": images,
            "turns": turns,
        }
        conversation = [{"from": who, "value": text} for who, text in turns]
        samples.append((key, images, conversation, encoded))
    write_crude_dataset(root, samples, fmt="chatml", samples_per_shard=1, split_ratio=(("train", 1.0),))
    return root, originals


def datamodule(path, tok, *, video=VIDEO, seq_length=4096, batch=1):
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        energon_plugins.create("image_processor", "qwen2-vl", {"min_pixels": 784, "max_pixels": 3136}),
        seq_length=seq_length,
        micro_batch_size=batch,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "qwen2-vl",
            "options": {"padding": "longest", "video": video, "on_error": "raise"},
        },
        batch_format=None,
    )


def reference_video(frames_list, num_frames=4):
    """transformers' Qwen2VLVideoProcessor on the kept frames of a full PyAV decode."""
    import transformers

    proc = transformers.Qwen2VLVideoProcessor(size={"shortest_edge": 784, "longest_edge": 3136})
    kept = [torch.from_numpy(f[frame_indices(len(f), num_frames)]).permute(0, 3, 1, 2) for f in frames_list]
    return proc(videos=kept, cap_pixels_per_frame=False, return_tensors="pt")


def runs(seq, token):
    out, start = [], None
    for i, t in enumerate(seq + [-1]):
        if t == token and start is None:
            start = i
        elif t != token and start is not None:
            out.append((start, i))
            start = None
    return out


def test_video_conversations_expand_each_video_by_its_grid(videos, tok):
    path, originals = videos
    dm = datamodule(path, tok)
    pad = tok.convert_tokens_to_ids("<|video_pad|>")
    start_id, end_id = (tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    seen = set()
    loader = dm.train_dataloader()
    while seen != set(SAMPLES):
        batch = next(loader)
        key = batch.__key__[0]
        seen.add(key)
        original = originals[key]
        ref = reference_video(original["videos"])
        assert torch.equal(batch.visual["video_grid_thw"], ref["video_grid_thw"])
        assert torch.allclose(batch.visual["pixel_values_videos"], ref["pixel_values_videos"], atol=1e-5)
        seq = batch.input_ids[0].tolist()
        labels = batch.labels[0]
        expected = [int(g.prod()) // 4 for g in ref["video_grid_thw"]]
        video_runs = runs(seq, pad)
        assert [b - a for a, b in video_runs] == expected == batch.video_token_counts.tolist()
        for a, b in video_runs:
            assert seq[a - 1] == start_id and seq[b] == end_id and (labels[a:b] == IGNORE).all()
        assert int(batch.num_videos[0]) == len(original["videos"])
        assert int(batch.num_images[0]) == len(original["images"])
        # The decoded text is the ChatML conversation, each tag replaced by its vision span.
        collapsed = [
            t
            for i, t in enumerate(seq)
            if not (t in (pad, tok.convert_tokens_to_ids("<|image_pad|>")) and i and seq[i - 1] == t)
        ]
        text = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        for who, content in original["turns"]:
            role = "user" if who == "human" else "assistant"
            content = content.replace("<image>", "<|vision_start|><|image_pad|><|vision_end|>")
            content = content.replace("<video>", "<|vision_start|><|video_pad|><|vision_end|>")
            text += f"<|im_start|>{role}\n{content}<|im_end|>\n"
        assert tok.decode(collapsed) == text
        answers = [t for who, t in original["turns"] if who == "gpt"]
        labelled = [
            tok.decode(labels[a:b], skip_special_tokens=True)
            for a, b in runs([int(x != IGNORE) for x in labels.tolist()], 1)
        ]
        assert labelled == answers


def test_vidqa_and_the_budget(tmp_path, tok):
    """A VidQASample's video goes before its question; over max_visual_tokens the sample
    keeps fewer frames (exactly what transformers' processor makes of them), then is skipped."""
    clip = encode_video(video_frames(16, (64, 64)), 8, gop=4)
    write_vidqa_dataset(tmp_path, [("q", clip, "What moves?", "A bar.")])
    every = np.stack(decode_every_frame(clip))
    full = next(datamodule(tmp_path, tok).train_dataloader())
    assert full.video_token_counts.tolist() == [8]  # 4 frames of 56x56: 2 x 4 x 4 / 4
    fewer = next(datamodule(tmp_path, tok, video={**VIDEO, "max_visual_tokens": 6}).train_dataloader())
    assert fewer.video_token_counts.tolist() == [4]
    assert torch.equal(fewer.visual["video_grid_thw"], reference_video([every], 2)["video_grid_thw"])
    text = tok.decode(fewer.input_ids[0])
    assert "<|vision_end|>\nWhat moves?" in text
    with pytest.raises(Exception, match=r"video_budget.*visual tokens 8 > video.max_visual_tokens 3"):
        next(
            datamodule(
                tmp_path, tok, video={**VIDEO, "max_visual_tokens": 3, "min_frames": 4}
            ).train_dataloader()
        )


def test_preview_draws_the_frames(videos, tok):
    from energon_plugins.testing import collect_rows

    path, _ = videos
    rows = collect_rows(datamodule(path, tok), 3)
    strips = [v for row in rows for v in row["videos"]]
    assert len(strips) == 4 and all(len(v["frames"]) == 4 and v["tokens"] for v in strips)
