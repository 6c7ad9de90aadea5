"""VideoLLaMA3's compressed video tokens through the ``hf-processor`` encoder.

VideoLLaMA3's video processor drops a frame's merged tokens whose pixels barely differ from
the previous frame's (``video_compression_mask``), so a video's token count depends on its
content. The golden video tests' clips change every pixel between frames and keep every
token; here a clip whose frames stand still (a real MP4, decoded by the encoder) must give
the processor's own ids and mask with tokens dropped, and a tiny VideoLLaMA3 model consumes
the encoded sample (it checks its video features against the video tokens).
"""

import numpy as np
import torch

FAMILY = "videollama3"
NUM_FRAMES = 4


def still_clip():
    """An MP4 of 8 identical frames at 8 fps and its frames decoded by plain PyAV."""
    from energon_plugins.testing import decode_every_frame, encode_video, video_frames

    frames = np.repeat(video_frames(1, (64, 48)), 8, axis=0)
    data = encode_video(frames, 8, gop=4)
    return data, np.stack(decode_every_frame(data))


def test_a_still_clip_keeps_the_processors_compressed_tokens(processor_dirs, golden):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from energon_plugin_hf_processor.tiny import TINY_SPECS
    from transformers import AutoProcessor

    from energon_plugins import BuildContext, ChatMLSample

    data, every = still_clip()
    enc = HFProcessorTaskEncoder(
        BuildContext(seq_length=4096),
        HFProcessorOptions(processor=str(processor_dirs[FAMILY]), video={"num_frames": NUM_FRAMES}),
    )
    sample = ChatMLSample(
        __key__="still",
        __restore_key__=(),
        conversation=[
            {"role": "user", "content": "<video>What moves?"},
            {"role": "assistant", "content": "Nothing."},
        ],
        images=[],
        videos=[data],
        video_parts=["0.mp4"],
    )
    out = enc.encode_sample(sample)

    processor = AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True)
    frames, metadata = golden.kept_frames(every, 8, NUM_FRAMES)
    messages = [
        {
            "role": "user",
            "content": [{"type": "video", "video": frames}, {"type": "text", "text": "What moves?"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Nothing."}]},
    ]
    ref = processor.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs=dict(do_sample_frames=False, video_metadata=[metadata]),
    )
    assert torch.equal(out.input_ids, ref["input_ids"][0])
    for key in ("pixel_values_videos", "video_grid_thw", "video_merge_sizes", "video_compression_mask"):
        assert torch.equal(out.visual[key], ref[key]), key
    mask = out.visual["video_compression_mask"]
    # A still frame after another keeps only its first token (min_tokens 1); a keyframe's
    # coding noise may keep more.
    per_frame = mask.view(NUM_FRAMES, -1)
    assert bool(per_frame[0].all()) and int((~per_frame[1:]).sum()) > 0
    video_tokens = int((out.input_ids == processor.video_token_id).sum())
    assert video_tokens == int(mask.sum()) == sum(out.video_token_counts)

    torch.manual_seed(0)
    model = TINY_SPECS[FAMILY].model(processor.tokenizer)
    labels = out.labels[None]
    loss = model(input_ids=out.input_ids[None], labels=labels, **out.visual).loss
    assert torch.isfinite(loss)
