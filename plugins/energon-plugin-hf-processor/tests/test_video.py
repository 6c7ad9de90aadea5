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

from energon_plugins.encoding.video.sampling import frame_indices
from energon_plugin_hf_processor.families import family_for
from energon_plugin_hf_processor.tiny import TINY_FAMILIES

VIDEO_FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision", "internvl", "smolvlm")
NUM_FRAMES = 4
IGNORE = -100


def reference(processor, original, golden, num_frames=NUM_FRAMES, markers=False, **kwargs):
    """The processor's own output for a sample: frames picked from a full PyAV decode."""
    from transformers.video_utils import VideoMetadata

    videos, metadata = [], []
    for _, _, every, fps in original["videos"]:
        indices = frame_indices(len(every), num_frames)
        videos.append(every[indices])
        metadata.append(VideoMetadata(
            total_num_frames=len(every), fps=float(fps), width=every.shape[2],
            height=every.shape[1], duration=len(every) / fps, frames_indices=indices))
    messages = golden.hf_messages(original["conversation"], original["images"], videos)
    if videos:
        kwargs["processor_kwargs"] = dict(do_sample_frames=False, video_metadata=metadata)
    return processor.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_tensors="pt",
        return_assistant_tokens_mask=markers, **kwargs)


def datamodule(path, processor_dir, tok, *, packed=False, seq_length=4096, **video):
    import energon_plugins

    kwargs = {}
    if packed:
        kwargs = {"packing": energon_plugins.create("packing_strategy", "first-fit-decreasing"),
                  "packing_buffer_size": 4}
    return energon_plugins.EnergonMultiModalDataModule(
        str(path), tok, None, seq_length=seq_length, micro_batch_size=2, num_workers=0,
        shuffle_buffer_size=None, task_encoder={"name": "hf-processor", "options": {
            "processor": str(processor_dir), "padding": "longest",
            "video": {"num_frames": NUM_FRAMES, **video}}}, **kwargs)


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


@pytest.mark.parametrize("family", [
    *VIDEO_FAMILIES, pytest.param("qwen2.5-vl/packed", id="qwen2.5-vl-packed"),
    pytest.param("internvl/packed", id="internvl-packed"),
])
def test_video_batches_equal_the_processors_output(family, processor_dirs, video_data, golden,
                                                   every_batch):
    from transformers import AutoProcessor

    family, _, packed = family.partition("/")
    path, originals = video_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    spec = family_for(processor)
    markers = "{% generation %}" in processor.chat_template
    dm = datamodule(path, processor_dirs[family], processor.tokenizer, packed=bool(packed))
    keys = [k for k in originals if spec.video_with_images or not originals[k]["images"]
            or not originals[k]["videos"]]
    encoder = dm.task_encoder
    checked, videos_seen = set(), 0
    for batch in every_batch(dm, keys):
        row_keys = [key.split(",") for key in batch.__key__]
        refs = {k: reference(processor, originals[k], golden, markers=markers)
                for keys_ in row_keys for k in keys_}
        check_vision(batch, [refs[k] for keys_ in row_keys for k in keys_], spec)
        counts = iter(batch.video_token_counts.tolist())
        for row, keys_ in enumerate(row_keys):
            start = 0
            for key in keys_:
                ref = refs[key]
                end = start + ref["input_ids"].shape[1]
                ids, labels = batch.input_ids[row, start:end], batch.labels[row, start:end]
                assert torch.equal(ids, ref["input_ids"][0]), (family, key)
                golden.check_labels(processor.tokenizer, ref, ids, labels,
                                    golden.answers(originals[key]["conversation"]),
                                    golden.END_OF_TURN[family])
                for field in spec.token_fields:
                    assert torch.equal(batch.token_fields[field][row, start:end],
                                       ref[field][0].long())
                video_ids = ids == encoder.video_token_id
                n_videos = len(originals[key]["videos"])
                per_video = [next(counts) for _ in range(n_videos)]
                if family not in ("internvl", "smolvlm"):  # their frames fill the image token
                    assert sum(per_video) == int(video_ids.sum()) > 0 or n_videos == 0
                assert all(c > 0 for c in per_video) and not bool((labels[video_ids] != IGNORE).any())
                videos_seen += n_videos
                checked.add(key)
                start = end
        assert int(batch.num_videos.sum()) == batch.video_token_counts.numel()
    assert checked == set(keys)
    assert videos_seen == sum(len(originals[k]["videos"]) for k in keys) >= 3
    if not spec.video_with_images:  # SmolVLM: images and videos in one sample are skipped
        assert dm.skip_counts() == {"ValueError": 1}


def test_second_per_grid_ts_follows_the_sampled_rate(processor_dirs, video_data, golden):
    """Qwen2.5-VL's temporal positions come from the kept frames' rate (fps sampling)."""
    from transformers import AutoProcessor

    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from energon_plugin_hf_processor.samples import ConversationSample
    from energon_plugins import BuildContext

    path, originals = video_data
    processor = AutoProcessor.from_pretrained(processor_dirs["qwen2.5-vl"], local_files_only=True)
    original = originals["clip"]  # 16 frames at 8 fps: 2 s
    for options, kept in (({"fps": 2.0}, 4), ({"fps": 4.0}, 8), ({"num_frames": 2}, 2)):
        enc = HFProcessorTaskEncoder(BuildContext(seq_length=4096), HFProcessorOptions(
            processor=str(processor_dirs["qwen2.5-vl"]), video=options))
        sample = ConversationSample(
            __key__="clip", __restore_key__=(), conversation=[
                ("user", original["conversation"][0]["value"]),
                ("assistant", original["conversation"][1]["value"])],
            images=[], videos=[original["videos"][0][1]], video_parts=["0.mp4"])
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
