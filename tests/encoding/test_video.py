"""Video frames through Energon's AV decoder: which frames the options keep, and that only they
are decoded, pixel for pixel equal to plain PyAV decoding every frame.

Real video files are encoded with PyAV from generated frames (tiny: 32x32, 1-2 s, a few fps)
in the containers Energon reads (MP4/H.264, WebM/VP9, Matroska, AVI/MPEG-4, QuickTime), and
read back through Energon's own loader from a prepared dataset.
"""

import io

import numpy as np
import pytest

from energon_plugins.encoding.video.budget import budget_plans, sampled_plan
from energon_plugins.encoding.video.decode import (
    VideoDecodeError,
    decode_frames,
    describe_part,
    read_video_info,
)
from energon_plugins.encoding.video.options import VideoOptions
from energon_plugins.encoding.video.sampling import VideoInfo, frame_count, frame_indices
from energon_plugins.testing.video import decode_every_frame, encode_video, video_frames


def decoder(data):
    from megatron.energon.av import AVDecoder

    return AVDecoder(io.BytesIO(data))


def info(frames=16, fps=8.0, size=(32, 32)):
    return VideoInfo(num_frames=frames, fps=fps, width=size[0], height=size[1], duration=frames / fps)


@pytest.mark.parametrize(
    "options, multiple, expected",
    [
        ({"num_frames": 4}, 1, [2, 6, 10, 14]),  # the middle of each quarter
        ({"num_frames": 3}, 1, [2, 8, 13]),
        ({"num_frames": 40}, 1, list(range(16))),  # never more than the video has
        ({"fps": 2.0}, 1, [2, 6, 10, 14]),  # 2 s at 2 fps
        ({}, 1, [2, 6, 10, 14]),  # fps 2 by default
        ({"fps": 8.0, "max_frames": 5}, 1, [1, 4, 8, 11, 14]),  # capped
        ({"fps": 0.1, "min_frames": 2}, 1, [4, 12]),  # held up to min_frames
        ({"num_frames": 5}, 2, [2, 6, 10, 14]),  # rounded down to the multiple
        ({"num_frames": 1}, 2, [4, 12]),  # at least one multiple
    ],
)
def test_frame_indices_follow_the_options(options, multiple, expected):
    video = info()
    count = frame_count(video, VideoOptions(**options), multiple)
    assert frame_indices(video.num_frames, count) == expected


def test_frame_indices_spread_evenly_and_never_repeat():
    for total in (1, 7, 16, 301):
        for count in range(1, min(total, 40) + 1):
            indices = frame_indices(total, count)
            assert len(set(indices)) == count and indices == sorted(indices)
            assert 0 <= indices[0] and indices[-1] < total
    with pytest.raises(ValueError, match="cannot keep 5 frames of a video with 4"):
        frame_indices(4, 5)


def test_options_are_checked():
    with pytest.raises(ValueError, match="num_frames and fps exclude each other"):
        VideoOptions(num_frames=4, fps=1.0)
    with pytest.raises(ValueError, match="min_frames"):
        VideoOptions(min_frames=8, max_frames=4)
    with pytest.raises(ValueError, match="budget_min_pixels"):
        VideoOptions(max_pixels=100, budget_min_pixels=200)


@pytest.mark.parametrize("container", ["mp4", "webm", "mkv", "avi", "mov"])
def test_kept_frames_equal_plain_pyav_decoding_and_keep_their_time_stamps(container):
    data = encode_video(video_frames(16, (32, 32)), 8, container=container, gop=5)
    every = decode_every_frame(data)
    dec = decoder(data)
    meta = read_video_info(dec)
    assert meta == info()
    for count in (1, 3, 6, 16):
        indices = frame_indices(meta.num_frames, count)
        video = decode_frames(dec, meta, indices)
        assert video.frames.shape == (count, 3, 32, 32) and video.indices == indices
        for frame, index in zip(video.frames, indices):
            assert np.array_equal(frame.permute(1, 2, 0).numpy(), every[index])
        assert video.timestamps == pytest.approx([i / 8 for i in indices])
        metadata = video.metadata()
        assert metadata["frames_indices"] == indices and metadata["fps"] == 8.0


def test_frames_asked_out_of_order_or_twice_are_still_right():
    data = encode_video(video_frames(12, (32, 32)), 6, gop=4)
    every = decode_every_frame(data)
    dec = decoder(data)
    meta = read_video_info(dec)
    video = decode_frames(dec, meta, [9, 2, 2, 11])
    for frame, index in zip(video.frames, [9, 2, 2, 11]):
        assert np.array_equal(frame.permute(1, 2, 0).numpy(), every[index])


def test_corrupt_and_truncated_files_raise_a_counted_skip_naming_the_part():
    data = encode_video(video_frames(16, (32, 32)), 8)
    for bad in (b"\x00" * 400, data[: len(data) // 2]):
        with pytest.raises(VideoDecodeError, match="video 'k.0.mp4' cannot be read") as caught:
            read_video_info(decoder(bad), "'k.0.mp4'")
        assert caught.value.reason == "video"


def test_describe_part_names_the_shard():
    from megatron.energon.source_info import SourceInfo

    sample = {
        "__key__": "k",
        "__sources__": (
            SourceInfo(
                dataset_path="/d", index=3, shard_name="shard-000002.tar", file_names=("k.0.mp4", "k.json")
            ),
        ),
    }
    assert describe_part(sample, "0.mp4") == "'k.0.mp4' in shard 'shard-000002.tar'"
    assert describe_part({"__key__": "k"}, "mp4") == "'k.mp4'"


def test_budget_plans_give_up_frames_then_pixels():
    videos = [info(16), info(8)]
    options = VideoOptions(num_frames=16, min_frames=4, budget_min_pixels=1000)
    plans = list(budget_plans(videos, options, 2, max_pixels=4000))
    assert plans[0].frames == (16, 8) and plans[0].max_pixels == 4000
    frames = [p.frames for p in plans if p.max_pixels == 4000]
    assert frames == [(16, 8), (12, 6), (8, 4), (6, 4), (4, 4)]
    assert [p.max_pixels for p in plans[len(frames) :]] == [3000, 2250, 1687, 1265, 1000]
    assert all(p.frames == (4, 4) for p in plans[len(frames) :])
    # Without a pixel floor the resolution is never lowered.
    assert all(
        p.max_pixels == 4000 for p in budget_plans(videos, VideoOptions(num_frames=16), 2, max_pixels=4000)
    )
    assert sampled_plan(videos, VideoOptions(fps=1.0), 1).frames == (2, 1)


def test_a_video_dataset_is_read_through_energons_loader(tmp_path):
    """Crude samples hand their video parts over as Energon's lazy AVDecoder."""
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from megatron.energon.av import AVDecoder

    from energon_plugins.testing import write_crude_dataset

    data = encode_video(video_frames(8, (32, 32)), 4)
    conversation = [{"from": "human", "value": "<video>What?"}, {"from": "gpt", "value": "A bar."}]
    write_crude_dataset(
        tmp_path,
        [
            ("a", [], conversation, [data]),
            ("b", [], conversation, [("webm", encode_video(video_frames(8, (32, 32)), 4, container="webm"))]),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )

    from megatron.energon import Cooker, DefaultTaskEncoder, basic_sample_keys, stateless

    @stateless
    def cook(sample):
        return dict(
            **basic_sample_keys(sample), parts={k: v for k, v in sample.items() if not k.startswith("__")}
        )

    class Raw(DefaultTaskEncoder):
        cookers = [Cooker(cook)]

        def encode_sample(self, sample):
            return sample

        def batch(self, samples):
            return samples

    loader = get_loader(
        get_train_dataset(
            str(tmp_path),
            batch_size=1,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            task_encoder=Raw(),
        )
    )
    seen = {}
    for batch in loader:
        sample = batch[0]
        seen[sample["__key__"]] = sample["parts"]
        if len(seen) == 2:
            break
    assert isinstance(seen["a"]["0.mp4"], AVDecoder) and isinstance(seen["b"]["0.webm"], AVDecoder)
    assert read_video_info(seen["b"]["0.webm"]).num_frames == 8


def test_only_the_kept_frames_and_their_keyframe_runs_are_decoded(monkeypatch):
    """Energon's reader seeks to the keyframe before each kept frame: frames between the kept
    ones are never decoded (counted by the reader itself)."""
    import av
    import megatron.energon.av.av_decoder as av_decoder

    data = encode_video(video_frames(48, (32, 32)), 8, gop=8, options={"x264-params": "scenecut=0"})
    with av.open(io.BytesIO(data)) as container:
        keyframes = [
            i for i, p in enumerate(p for p in container.demux(video=0) if p.pts is not None) if p.is_keyframe
        ]
    assert keyframes == list(range(0, 48, 8))
    readers = []

    class CountingReader(av_decoder.AVReaderByFrames):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.yielded = 0
            readers.append(self)

        def seek_read(self, start, end):
            for frame in super().seek_read(start, end):
                self.yielded += 1
                yield frame

    monkeypatch.setattr(av_decoder, "AVReaderByFrames", CountingReader)
    dec = decoder(data)
    meta = read_video_info(dec)

    def decoded(indices):
        readers.clear()
        decode_frames(dec, meta, indices)
        return sum(r.yielded + r.skipped for r in readers)

    assert decoded([8, 24, 40]) == 3  # keyframes: one decode each, nothing between
    assert decoded([4, 12, 20, 28, 36, 44]) == 6 * 5  # each: its keyframe run (4 frames) + itself
    assert decoded(list(range(48))) == 48
