"""Videos through the ``hf-processor`` encoder, token-identical to the processor's own output.

A real Energon dataset holds MP4 and WebM files (encoded with PyAV from generated frames),
alone, with an image, two in one multi-turn conversation, next to a text-only sample. Read
through the datamodule (unpacked and packed), every sample's ids, labels, pixel values and
video inputs (``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``, InternVL's
frames in ``pixel_values``, SmolVLM's row of frames) must equal
``processor.apply_chat_template(messages, tokenize=True, ...)`` given the same frames decoded
by plain PyAV (every frame, then the kept ones picked) and their ``video_metadata``.
"""

import pytest
import torch
from energon_plugin_hf_processor.families import family_for
from energon_plugin_hf_processor.tiny import TINY_FAMILIES

VIDEO_FAMILIES = (
    "qwen2-vl",
    "qwen2.5-vl",
    "qwen3-vl",
    "llava-onevision",
    "internvl",
    "smolvlm",
    "glm-4v",
    "glm-5-next",
    "perception-lm",
    "llava-next-video",
    "video-llava",
    "gemma4",
    "gemma4-unified",
    "qwen2.5-omni",
    "qwen3-omni",
    "videollama3",
)
NUM_FRAMES = 4
IGNORE = -100


def reference(processor, original, golden, num_frames=NUM_FRAMES, markers=False, **kwargs):
    """The processor's own output for a sample: frames picked from a full PyAV decode."""
    picked = [golden.kept_frames(every, fps, num_frames) for _, _, every, fps in original["videos"]]
    videos, metadata = [frames for frames, _ in picked], [meta for _, meta in picked]
    messages = golden.hf_messages(original["conversation"], original["images"], videos)
    if videos:
        kwargs["processor_kwargs"] = dict(do_sample_frames=False, video_metadata=metadata)
    return processor.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        return_assistant_tokens_mask=markers,
        **kwargs,
    )


def datamodule(path, processor_dir, tok, *, packed=False, seq_length=4096, **video):
    import energon_plugins

    kwargs = {}
    if packed:
        kwargs = {
            "packing": energon_plugins.create("packing_strategy", "first-fit-decreasing"),
            "packing_buffer_size": 4,
        }
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=seq_length,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {
                "processor": str(processor_dir),
                "padding": "longest",
                "video": {"num_frames": NUM_FRAMES, **video},
            },
        },
        batch_format=None,
        **kwargs,
    )


def check_vision(batch, refs, spec):
    """Every vision input of the batch is the references' combined by the family's rule."""
    for key in ("pixel_values", "image_grid_thw", *spec.visual):
        parts = [r[key] for r in refs if key in r]
        got = batch.visual.get(key) if key in spec.visual and batch.visual else getattr(batch, key, None)
        if not parts:
            assert got is None, key
            continue
        combine = spec.combine(key) if key != "image_grid_thw" else (lambda p: torch.cat(p))
        assert torch.equal(got, combine(parts)), key


@pytest.mark.parametrize(
    "family",
    [
        *VIDEO_FAMILIES,
        pytest.param("qwen2.5-vl/packed", id="qwen2.5-vl-packed"),
        pytest.param("internvl/packed", id="internvl-packed"),
    ],
)
def test_video_batches_equal_the_processors_output(family, processor_dirs, video_data, golden, every_batch):
    from transformers import AutoProcessor

    family, _, packed = family.partition("/")
    path, originals = video_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    spec = family_for(processor)
    markers = "{% generation %}" in processor.chat_template
    dm = datamodule(path, processor_dirs[family], processor.tokenizer, packed=bool(packed))
    keys = [
        k
        for k in originals
        if spec.video_with_images or not originals[k]["images"] or not originals[k]["videos"]
    ]
    encoder = dm.task_encoder
    checked, videos_seen = set(), 0
    for batch in every_batch(dm, keys):
        row_keys = [key.split(",") for key in batch.__key__]
        refs = {
            k: reference(processor, originals[k], golden, markers=markers)
            for keys_ in row_keys
            for k in keys_
        }
        check_vision(batch, [refs[k] for keys_ in row_keys for k in keys_], spec)
        counts = iter(batch.video_token_counts.tolist())
        rows = golden.checked_rows(
            batch,
            refs,
            processor.tokenizer,
            lambda key: golden.answers(originals[key]["conversation"]),
            golden.END_OF_TURN[family],
            spec.token_fields,
        )
        for _, key, ids, labels, _, _ in rows:
            video_ids = ids == encoder.video_token_id
            n_videos = len(originals[key]["videos"])
            per_video = [next(counts) for _ in range(n_videos)]
            # GLM-5.3's frames and images share <|image|> (video marks tell them apart).
            shared = family == "glm-5-next" and originals[key]["images"]
            if family not in ("internvl", "smolvlm") and not shared:  # frames fill the image token
                assert sum(per_video) == int(video_ids.sum()) > 0 or n_videos == 0
            assert all(c > 0 for c in per_video) and not bool((labels[video_ids] != IGNORE).any())
            if key not in checked:  # a packed loader may bring a key round again
                videos_seen += n_videos
            checked.add(key)
        assert int(batch.num_videos.sum()) == batch.video_token_counts.numel()
    assert checked == set(keys)
    assert videos_seen == sum(len(originals[k]["videos"]) for k in keys) >= 3
    if not spec.video_with_images:  # SmolVLM: images and videos in one sample are skipped
        assert dm.skip_counts() == {"ValueError": 1}


def test_second_per_grid_ts_follows_the_sampled_rate(processor_dirs, video_data, golden):
    """Qwen2.5-VL's temporal positions come from the kept frames' rate (fps sampling)."""
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from transformers import AutoProcessor

    from energon_plugins import BuildContext, ChatMLSample

    path, originals = video_data
    processor = AutoProcessor.from_pretrained(processor_dirs["qwen2.5-vl"], local_files_only=True)
    original = originals["clip"]  # 16 frames at 8 fps: 2 s
    for options, kept in (({"fps": 2.0}, 4), ({"fps": 4.0}, 8), ({"num_frames": 2}, 2)):
        enc = HFProcessorTaskEncoder(
            BuildContext(seq_length=4096),
            HFProcessorOptions(processor=str(processor_dirs["qwen2.5-vl"]), video=options),
        )
        sample = ChatMLSample(
            __key__="clip",
            __restore_key__=(),
            conversation=[
                {"role": "user", "content": original["conversation"][0]["value"]},
                {"role": "assistant", "content": original["conversation"][1]["value"]},
            ],
            images=[],
            videos=[original["videos"][0][1]],
            video_parts=["0.mp4"],
        )
        out = enc.encode_sample(sample)
        ref = reference(processor, original, golden, num_frames=kept)
        assert torch.equal(out.input_ids, ref["input_ids"][0])
        assert torch.equal(out.visual["second_per_grid_ts"], ref["second_per_grid_ts"])
        # 2 frames per temporal patch at kept/2 s: the seconds a grid step spans.
        assert out.visual["second_per_grid_ts"].tolist() == pytest.approx([2 / (kept / 2.0)])
        assert out.visual["video_grid_thw"].tolist()[0][0] == kept // 2


def test_tiny_families_with_a_video_processor_are_the_ones_tested():
    from energon_plugin_hf_processor.tiny import build_tiny_processor

    with_video = {f for f in TINY_FAMILIES if getattr(build_tiny_processor(f), "video_processor", None)}
    assert with_video == set(VIDEO_FAMILIES)


# ------------------------------------------------------------------ budgets
def encoder(processor_dirs, family="qwen2-vl", seq_length=4096, **options):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions

    from energon_plugins import BuildContext

    return HFProcessorTaskEncoder(
        BuildContext(seq_length=seq_length),
        HFProcessorOptions(processor=str(processor_dirs[family]), **options),
    )


@pytest.fixture(scope="module")
def big_clip():
    """16 frames of 64x64 at 8 fps: 56x56 per frame at the tiny Qwen2-VL's max_pixels 3136."""
    from energon_plugins.testing import decode_every_frame, encode_video, video_frames

    data = encode_video(video_frames(16, (64, 64)), 8, gop=4)
    return data, decode_every_frame(data)


def clip_sample(data, question="<video>What happens?", image=None):
    from energon_plugins import ChatMLSample

    return ChatMLSample(
        __key__="big",
        __restore_key__=(),
        conversation=[
            {"role": "user", "content": question},
            {"role": "assistant", "content": "A bar moves."},
        ],
        images=[image] if image else [],
        videos=[data],
        video_parts=["0.mp4"],
    )


def test_the_budget_gives_up_frames_then_resolution_then_skips(processor_dirs, big_clip, golden):
    import numpy as np
    from megatron.energon import SkipSample
    from megatron.energon.errors import FatalSampleError
    from transformers import AutoProcessor

    data, every = big_clip
    processor = AutoProcessor.from_pretrained(processor_dirs["qwen2-vl"], local_files_only=True)
    original = {
        "videos": [("mp4", data, np.stack(every), 8)],
        "images": [],
        "conversation": [
            {"from": "human", "value": "<video>What happens?"},
            {"from": "gpt", "value": "A bar moves."},
        ],
    }
    video = {"num_frames": 8, "max_pixels": 3136}
    full = encoder(processor_dirs, video=video).encode_sample(clip_sample(data))
    assert full.visual["video_grid_thw"].tolist() == [[4, 4, 4]] and full.video_token_counts == [16]
    # Over 10 visual tokens: 8 -> 6 -> 4 frames (8 tokens), the processor's own output for 4.
    fewer = encoder(processor_dirs, video={**video, "max_visual_tokens": 10}).encode_sample(clip_sample(data))
    assert fewer.visual["video_grid_thw"].tolist() == [[2, 4, 4]] and fewer.video_token_counts == [8]
    assert torch.equal(
        fewer.input_ids,
        reference(
            processor,
            original,
            golden,
            4,
            processor_kwargs={"videos_kwargs": {"size": {"shortest_edge": 784, "longest_edge": 3136}}},
        )["input_ids"][0],
    )
    # At least 6 frames: the resolution goes down instead (3136 -> 2352 px: 28x28 frames).
    floor = {**video, "max_visual_tokens": 10, "min_frames": 6, "budget_min_pixels": 784}
    lower = encoder(processor_dirs, video=floor).encode_sample(clip_sample(data))
    assert lower.visual["video_grid_thw"].tolist() == [[3, 2, 2]] and lower.video_token_counts == [3]
    # Without a pixel floor no plan fits: skipped and counted, or an error naming the sample.
    no_floor = {**video, "max_visual_tokens": 10, "min_frames": 6}
    enc = encoder(processor_dirs, video=no_floor)
    with pytest.raises(SkipSample):
        enc.encode_sample(clip_sample(data))
    assert enc.error_counts() == {"video_budget": 1}
    with pytest.raises(
        FatalSampleError,
        match=r"'big' \(video_budget\).*visual tokens 12 > "
        r"video.max_visual_tokens 10",
    ):
        encoder(processor_dirs, video=no_floor, on_error="raise").encode_sample(clip_sample(data))


def test_images_count_in_the_budget_and_seq_length_trades_frames_too(processor_dirs, big_clip, make_image):
    from megatron.energon import SkipSample

    data, _ = big_clip
    video = {"num_frames": 8, "max_pixels": 3136}
    image = make_image((56, 56), 3)  # 4 tokens at the tiny image processor's settings
    both = encoder(processor_dirs, video={**video, "max_visual_tokens": 14}).encode_sample(
        clip_sample(data, "<image><video>Same?", image)
    )
    assert both.image_token_counts == [4] and both.video_token_counts == [8]  # 4 + 8 <= 14
    # No visual budget, but seq_length: 8 frames do not fit, 4 do.
    full = encoder(processor_dirs, video=video).encode_sample(clip_sample(data))
    short = encoder(processor_dirs, seq_length=full.length - 1, video=video)
    cut = short.encode_sample(clip_sample(data))
    assert cut.video_token_counts == [12] and cut.length == full.length - 4
    tiny = encoder(processor_dirs, seq_length=20, video=video)
    with pytest.raises(SkipSample):
        tiny.encode_sample(clip_sample(data))
    assert tiny.error_counts() == {"too_long": 1}


def test_llava_onevision_needs_one_frame_count(processor_dirs, big_clip):
    """Its model takes a batch's videos as one (videos, frames, ...) tensor: without
    video.num_frames a video sample stops the run with the option named."""
    from megatron.energon.errors import FatalSampleError

    enc = encoder(processor_dirs, "llava-onevision", video={"fps": 2.0})
    with pytest.raises(FatalSampleError, match="video.num_frames"):
        enc.encode_sample(clip_sample(big_clip[0]))
    with pytest.raises(Exception, match="task_encoder.options.video.max_pixels"):
        encoder(processor_dirs, "llava-onevision", video={"max_pixels": 1000})


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision"])
def test_token_counts_known_before_decoding_are_exact(family, processor_dirs, big_clip):
    """The plans a budget skips without decoding are counted by the processor itself."""
    from energon_plugins import as_av_decoder, read_video_info

    data, _ = big_clip
    enc = encoder(processor_dirs, family, video={"num_frames": 6})
    infos = [read_video_info(as_av_decoder(data))]
    for plan in list(enc.video.plans(infos))[:3]:
        predicted = enc.video.predicted_tokens(infos, plan)
        n = plan.frames[0]
        out = encoder(processor_dirs, family, video={"num_frames": n}).encode_sample(clip_sample(data))
        assert predicted == out.video_token_counts, (family, plan)


# ------------------------------------------------------------------ samples and errors
def test_vidqa_samples_put_the_video_before_the_question(processor_dirs, tmp_path, golden, every_batch):
    import numpy as np
    from transformers import AutoProcessor

    from energon_plugins.testing import decode_every_frame, encode_video, video_frames, write_vidqa_dataset

    clips = {f"q{i}": encode_video(video_frames(8 + 4 * i, (32, 32), seed=i), 4) for i in range(2)}
    write_vidqa_dataset(
        tmp_path, [(k, v, f"What is in clip {k}?", "A bar.") for k, v in clips.items()], samples_per_shard=1
    )
    processor = AutoProcessor.from_pretrained(processor_dirs["qwen2.5-vl"], local_files_only=True)
    dm = datamodule(tmp_path, processor_dirs["qwen2.5-vl"], processor.tokenizer)
    for batch in every_batch(dm, list(clips)):
        for row, key in enumerate(batch.__key__):
            original = {
                "videos": [("mp4", clips[key], np.stack(decode_every_frame(clips[key])), 4)],
                "images": [],
                "conversation": [
                    {"from": "human", "value": f"<video>What is in clip {key}?"},
                    {"from": "gpt", "value": "A bar."},
                ],
            }
            ref = reference(processor, original, golden)
            n = ref["input_ids"].shape[1]
            assert torch.equal(batch.input_ids[row, :n], ref["input_ids"][0])


def test_corrupt_and_truncated_videos_are_skipped_and_counted_or_raise(processor_dirs, tmp_path):
    from transformers import AutoProcessor

    import energon_plugins
    from energon_plugins.testing import encode_video, video_frames, write_crude_dataset

    good = encode_video(video_frames(8, (32, 32)), 4)
    turns = [{"from": "human", "value": "<video>What?"}, {"from": "gpt", "value": "A bar."}]
    write_crude_dataset(
        tmp_path,
        [
            ("good", [], turns, [good]),
            ("garbage", [], turns, [b"\x00" * 300]),
            ("cut", [], turns, [good[: len(good) // 2]]),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )
    tok = AutoProcessor.from_pretrained(processor_dirs["qwen2-vl"], local_files_only=True).tokenizer

    def dm(on_error):
        return energon_plugins.EnergonMultiModalDataModule(
            str(tmp_path),
            tok,
            None,
            seq_length=1024,
            micro_batch_size=1,
            num_workers=0,
            shuffle_buffer_size=None,
            task_encoder={
                "name": "hf-processor",
                "options": {"processor": str(processor_dirs["qwen2-vl"]), "on_error": on_error},
            },
            batch_format=None,
        )

    skipping = dm("skip")
    loader = skipping.train_dataloader()
    keys = [next(loader).__key__[0] for _ in range(2)]  # good, (garbage, cut), good
    assert keys == ["good", "good"]
    assert skipping.skip_counts() == {"video": 2}
    with pytest.raises(
        Exception,
        match=r"\(video\): video 'garbage.0.mp4' in shard "
        r"'shard-000001.tar' cannot be read: InvalidDataError",
    ):
        raising = dm("raise").train_dataloader()
        for _ in range(3):
            next(raising)


# ------------------------------------------------------------------ packing and resume
def resume_loader(path, processor_dir, tok, workers):
    import energon_plugins

    strategy = energon_plugins.create("packing_strategy", "best-fit-decreasing", {"carry_over": True})
    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=160,
        micro_batch_size=2,
        num_workers=workers,
        shuffle_buffer_size=3,
        packing=strategy,
        packing_buffer_size=4,
        task_encoder={
            "name": "hf-processor",
            "options": {"processor": str(processor_dir), "padding": "longest", "video": {"fps": 2.0}},
        },
        batch_format=None,
    ).train_dataloader()


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_packing_with_video_token_counts_resumes_exactly(workers, processor_dirs, video_data):
    """Each sample's length (video tokens included) is exact before packing; a restored loader
    continues with the same packed batches, videos and all."""
    from transformers import AutoProcessor

    path, originals = video_data
    tok = AutoProcessor.from_pretrained(processor_dirs["qwen2-vl"], local_files_only=True).tokenizer
    first = resume_loader(path, processor_dirs["qwen2-vl"], tok, workers)
    for _ in range(2):
        next(first)
    state = first.save_state()
    expected = [next(first) for _ in range(3)]
    second = resume_loader(path, processor_dirs["qwen2-vl"], tok, workers)
    second.restore_state(state)
    packed_videos = 0
    for want in expected:
        got = next(second)
        assert got.__key__ == want.__key__
        assert torch.equal(got.input_ids, want.input_ids)
        assert torch.equal(got.num_videos, want.num_videos)
        for key in ("pixel_values_videos", "video_grid_thw"):
            assert (got.visual or {}).keys() == (want.visual or {}).keys()
            if want.visual and key in want.visual:
                assert torch.equal(got.visual[key], want.visual[key])
        # The packed rows hold the videos their tokens ask for.
        grid = want.visual["video_grid_thw"] if want.visual and "video_grid_thw" in want.visual else None
        tokens = int((want.input_ids == tok.convert_tokens_to_ids("<|video_pad|>")).sum())
        assert tokens == (int(grid.prod(-1).sum()) // 4 if grid is not None else 0)
        assert want.input_ids.shape[1] <= 160
        packed_videos += int(want.num_videos.sum())
    assert packed_videos > 0
