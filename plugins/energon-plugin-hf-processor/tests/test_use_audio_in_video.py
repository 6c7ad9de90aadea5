"""Qwen-Omni's ``use_audio_in_video`` (``audio.use_audio_in_video``): each video's own sound track.

A real Energon dataset holds videos with a sound track written by PyAV (H.264 + AAC in MP4 and
Matroska, VP9 + Opus in WebM): one alone, one after a WAV ``<audio>`` clip, two in a multi-turn
conversation, and a text-only sample. Read through the datamodule (unpacked and packed), every
sample's ids, labels, ``pixel_values_videos``, ``video_grid_thw``, ``video_second_per_grid``,
``input_features`` and ``feature_attention_mask`` equal the processor's own output for the same
frames (plain PyAV, every frame decoded, the kept ones picked) and the same sound tracks (plain
PyAV, resampled to 16 kHz mono), for Qwen2.5-Omni and Qwen3-Omni. The processor is called as
``apply_chat_template(..., load_audio_from_video=True)`` calls it, on the text the chat template
renders: ``apply_chat_template`` itself cannot be given decoded sound tracks (it reads a
video's audio from its file, with torchcodec), so the reference passes them as transformers'
``audio_from_video_indices`` path takes them (one clip per slot, in conversation order). A tiny
thinker consumes every batch with ``use_audio_in_video=True``.
"""

import numpy as np
import pytest
import torch
from energon_plugin_hf_processor.families import family_for

from energon_plugins.testing import (
    decode_every_frame,
    decode_every_sample,
    encode_tone,
    encode_video,
    encode_video_with_tone,
    video_frames,
    write_crude_dataset,
)

RATE = 16000
NUM_FRAMES = 8
IGNORE = -100
FAMILIES = ("qwen2.5-omni", "qwen3-omni")


def turn(role, *parts):
    """A ChatML turn: an answer's text, or a question's typed parts (``"video"`` and
    ``"audio"`` are media parts, other strings text)."""
    if role == "assistant":
        return {"role": role, "content": "".join(parts)}
    content = [{"type": p} if p in ("video", "audio") else {"type": "text", "text": p} for p in parts]
    return {"role": role, "content": content}


# key -> (videos as (container, seconds, sound track rate, tone Hz), <audio> clips as (ext,
# seconds, rate, tone Hz), conversation)
SAMPLES = {
    "track": (
        [("mp4", 2.5, 22050, 440)],
        [],
        [turn("user", "video", "What do you see and hear?"), turn("assistant", "A bar and a tone.")],
    ),
    "clip-then-track": (
        [("mkv", 1.5, 44100, 550)],
        [("wav", 0.8, 16000, 330)],
        [turn("user", "audio", "video", "Same pitch?"), turn("assistant", "No.")],
    ),
    "two-tracks": (
        [("mp4", 1.0, 16000, 300), ("webm", 2.2, 48000, 660)],
        [],
        [
            turn("user", "video", "video", "Which is longer?"),
            turn("assistant", "The second."),
            turn("user", "And higher?"),
            turn("assistant", "The second too."),
        ],
    ),
    "text": ([], [], [turn("user", "Say hello."), turn("assistant", "Hello.")]),
}


@pytest.fixture(scope="module")
def track_data(tmp_path_factory):
    """The crude ``chatml`` dataset of :data:`SAMPLES`; ``originals[key]`` holds each video's
    frames and sound track and each clip's samples, decoded by plain PyAV."""
    path = tmp_path_factory.mktemp("use-audio-in-video")
    samples, originals = [], {}
    for key, (videos, clips, conversation) in SAMPLES.items():
        video_files = [(ext, encode_video_with_tone(ext, *spec)) for ext, *spec in videos]
        clip_files = [(ext, encode_tone(ext, *spec)) for ext, *spec in clips]
        originals[key] = {
            "videos": [(np.stack(decode_every_frame(data)), 8) for _, data in video_files],
            "tracks": [decode_every_sample(data, RATE) for _, data in video_files],
            "clips": [decode_every_sample(data, RATE) for _, data in clip_files],
            "conversation": conversation,
        }
        samples.append((key, [], conversation, video_files, clip_files))
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return path, originals


def reference(processor, original, golden, **flag):
    """The processor's own output, called as ``apply_chat_template(messages, tokenize=True,
    load_audio_from_video=True)`` calls it, each video's decoded sound track in its slot."""
    picked = [golden.kept_frames(every, fps, NUM_FRAMES) for every, fps in original["videos"]]
    videos, metadata = [frames for frames, _ in picked], [meta for _, meta in picked]
    messages = golden.hf_messages(original["conversation"], [], videos)
    prompt = processor.apply_chat_template(messages, tokenize=False)
    # One audio slot per video and per audio part, in conversation order (transformers'
    # OmniModalProcessorMixin._multimodal_inputs_from_conversations).
    audio, from_video, video_index, clips = [], [], iter(range(len(videos))), iter(original["clips"])
    for part in (p for m in messages for p in m["content"] if p["type"] in ("video", "audio")):
        if part["type"] == "video":
            index = next(video_index)
            audio.append(original["tracks"][index])
            from_video.append(index)
        else:
            audio.append(next(clips))
            from_video.append(None)
    kwargs = dict(do_sample_frames=False, video_metadata=metadata) if videos else {}
    if audio:
        kwargs["sampling_rate"] = RATE
    return processor(
        text=prompt,
        videos=[videos] if videos else None,
        audio=audio or None,
        audio_from_video_indices=from_video,
        return_tensors="pt",
        **(flag or {"load_audio_from_video": True}),
        **kwargs,
    )


def datamodule(path, processor_dir, tok, *, packed=False, **audio):
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
        seq_length=4096,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {
                "processor": str(processor_dir),
                "padding": "longest",
                "video": {"num_frames": NUM_FRAMES},
                "audio": {"use_audio_in_video": True, **audio},
            },
        },
        batch_format=None,
        **kwargs,
    )


VISUAL = (
    "pixel_values_videos",
    "video_grid_thw",
    "video_second_per_grid",
    "input_features",
    "feature_attention_mask",
)


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("family", FAMILIES)
def test_sound_tracks_of_videos_equal_the_processors_output(
    family, packed, processor_dirs, track_data, golden, every_batch
):
    from transformers import AutoProcessor

    path, originals = track_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    spec = family_for(processor)
    dm = datamodule(path, processor_dirs[family], processor.tokenizer, packed=packed)
    encoder = dm.task_encoder
    audio_id, video_id = encoder.audio_token_id, encoder.video_token_id
    checked, interleaved = set(), set()
    for batch in every_batch(dm, list(originals)):
        row_keys = [key.split(",") for key in batch.__key__]
        refs = {k: reference(processor, originals[k], golden) for keys in row_keys for k in keys}
        ordered = [refs[k] for keys in row_keys for k in keys]
        for name in VISUAL:
            parts = [ref[name] for ref in ordered if name in ref]
            assert (name in (batch.visual or {})) == bool(parts), name
            if parts:
                assert torch.equal(torch.as_tensor(batch.visual[name]), spec.combine(name)(parts)), name
        rows = golden.checked_rows(
            batch,
            refs,
            processor.tokenizer,
            lambda key: golden.answers(originals[key]["conversation"]),
            golden.END_OF_TURN[family],
        )
        for _, key, ids, labels, _, _ in rows:
            media = (ids == audio_id) | (ids == video_id)
            assert not bool((labels[media] != IGNORE).any()), key
            # Every sound track's tokens sit inside its video's span, with frames after them.
            audio_at = (ids == audio_id).nonzero().flatten().tolist()
            video_at = (ids == video_id).nonzero().flatten().tolist()
            tracks = len(originals[key]["tracks"])
            if tracks and audio_at and video_at[0] < audio_at[0] < video_at[-1]:
                interleaved.add(key)
            checked.add(key)
    assert checked == set(originals)
    assert interleaved >= {"track", "two-tracks"}
    assert dm.skip_counts() == {}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_deprecated_flag_name_gives_the_same_tokens(family, processor_dirs, track_data, golden):
    """The reference's ``load_audio_from_video=True`` is what ``use_audio_in_video=True`` (the
    name Qwen-Omni's processors took before transformers 5.24 and the thinker's ``forward``
    still takes) turns into, so the golden test holds for both names."""
    from transformers import AutoProcessor

    _, originals = track_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    new = reference(processor, originals["clip-then-track"], golden)
    old = reference(processor, originals["clip-then-track"], golden, use_audio_in_video=True)
    assert torch.equal(new["input_ids"], old["input_ids"])
    assert torch.equal(new["input_features"], old["input_features"])


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tiny_thinker_consumes_the_batches_with_use_audio_in_video(
    family, processor_dirs, track_data, every_batch
):
    from energon_plugin_hf_processor.tiny import TINY_SPECS
    from transformers import AutoProcessor

    path, originals = track_data
    tok = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True).tokenizer
    torch.manual_seed(0)
    model = TINY_SPECS[family].model(tok).eval()
    dm = datamodule(path, processor_dirs[family], tok)
    seen = 0
    for batch in every_batch(dm, list(originals)):
        kwargs = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask.long(),
            "labels": batch.labels,
            **(batch.visual or {}),
        }
        with torch.no_grad():
            out = model(**kwargs, use_audio_in_video=True)
        assert torch.isfinite(out.loss), (family, batch.__key__)
        seen += int(batch.num_videos.sum())
    assert seen >= sum(len(o["videos"]) for o in originals.values())


# ------------------------------------------------------------------ bad input
def skip_datamodule(path, processor_dir, tok, on_error):
    import energon_plugins

    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=2048,
        micro_batch_size=1,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {
                "processor": str(processor_dir),
                "on_error": on_error,
                "video": {"num_frames": 4},
                "audio": {"use_audio_in_video": True},
            },
        },
        batch_format=None,
    )


@pytest.mark.bad_input
def test_a_video_without_a_sound_track_is_a_counted_skip_naming_the_part(processor_dirs, tmp_path):
    from transformers import AutoProcessor

    question = [turn("user", "video", "What?"), turn("assistant", "A bar.")]
    write_crude_dataset(
        tmp_path,
        [
            ("sound", [], question, [("mp4", encode_video_with_tone("mp4", 1.0, 16000))]),
            ("silent", [], question, [("mp4", encode_video(video_frames(8)))]),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )
    processor_dir = processor_dirs["qwen2.5-omni"]
    tok = AutoProcessor.from_pretrained(processor_dir, local_files_only=True).tokenizer
    skipping = skip_datamodule(tmp_path, processor_dir, tok, "skip")
    loader = skipping.train_dataloader()
    assert [next(loader).__key__[0] for _ in range(2)] == ["sound", "sound"]
    counts = skipping.skip_counts()
    assert set(counts) == {"audio"} and counts["audio"] >= 1
    raising = skip_datamodule(tmp_path, processor_dir, tok, "raise").train_dataloader()
    with pytest.raises(
        Exception,
        match=r"video 'silent\.0\.mp4' in shard '[^']+' has no sound track "
        r"\(task_encoder\.options\.audio\.use_audio_in_video\)",
    ):
        for _ in range(3):
            next(raising)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "family, why",
    [
        ("gemma4", "call does not take load_audio_from_video"),  # videos and audio, no interleaving
        ("qwen2.5-vl", "does not take both videos and audio"),
        ("qwen2-audio", "does not take both videos and audio"),
    ],
)
def test_a_processor_without_use_audio_in_video_is_a_config_error(family, why, processor_dirs):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions

    from energon_plugins import BuildContext, ConfigError

    options = HFProcessorOptions(processor=str(processor_dirs[family]), audio={"use_audio_in_video": True})
    with pytest.raises(ConfigError, match=rf"task_encoder\.options\.audio\.use_audio_in_video: \w+.*{why}"):
        HFProcessorTaskEncoder(BuildContext(seq_length=1024), options)


@pytest.mark.bad_input
@pytest.mark.parametrize("name", ["load_audio_from_video", "use_audio_in_video", "audio_from_video_indices"])
def test_the_flag_is_not_a_processor_kwarg(name):
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=rf"processor_kwargs: {name} are set by the encoder"):
        HFProcessorOptions(processor_kwargs={name: True})
