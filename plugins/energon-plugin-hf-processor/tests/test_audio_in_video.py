"""Audio parts held in video containers (``0.audio.mp4``): their audio track is the clip.

A real Energon dataset holds videos with a sound track written by PyAV (H.264 + AAC in MP4,
MOV and Matroska, VP9 + Opus in WebM), one beside a WAV clip. Read through the datamodule,
every sample's ids, labels and audio features equal ``processor.apply_chat_template`` given the
same files' audio tracks decoded by plain PyAV (every frame, resampled to 16 kHz mono by
libswresample), for Qwen2-Audio, Qwen2.5-Omni and Qwen3-Omni. A video without an audio track
used as an audio part is a counted skip (``audio``), or an error naming the part under
``on_error: raise``.
"""

import pytest
import torch
from energon_plugin_hf_processor.families import family_for

from energon_plugins.testing import (
    decode_every_sample,
    encode_tone,
    encode_video,
    encode_video_with_tone,
    video_frames,
    write_crude_dataset,
)

RATE = 16000


def ask(question, answer, clips=1):
    """A typed ChatML conversation: ``clips`` audio parts, then the question."""
    parts = [{"type": "audio"}] * clips + [{"type": "text", "text": question}]
    return [{"role": "user", "content": parts}, {"role": "assistant", "content": answer}]


# key -> (audio parts as (part extension, seconds, sampling rate, tone Hz), conversation); an
# ``audio.<container>`` part is a video whose sound track is the tone
SAMPLES = {
    "mp4-track": ([("audio.mp4", 1.2, 22050, 440)], ask("What do you hear?", "A tone.")),
    "wav-then-mkv": (
        [("wav", 0.8, 16000, 330), ("audio.mkv", 1.0, 44100, 550)],
        ask("Which is higher?", "The second.", clips=2),
    ),
    "webm-track": ([("audio.webm", 0.9, 48000, 660)], ask("Pitch?", "High.")),
    "mov-track": ([("audio.mov", 0.7, 24000, 440)], ask("Again?", "Yes.")),
}


def encode_part(ext, seconds, rate, freq):
    """An audio part's file: a tone, or a video whose sound track is the tone."""
    if ext.startswith("audio."):
        return encode_video_with_tone(ext.split(".", 1)[1], seconds, rate, freq)
    return encode_tone(ext, seconds, rate, freq)


@pytest.fixture(scope="module")
def video_audio_data(tmp_path_factory):
    """The crude ``chatml`` dataset of :data:`SAMPLES`; ``originals[key] = (waveforms,
    conversation)``, each audio track decoded by plain PyAV."""
    path = tmp_path_factory.mktemp("audio-in-video")
    samples, originals = [], {}
    for key, (parts, conversation) in SAMPLES.items():
        files = [(ext, encode_part(ext, *spec)) for ext, *spec in parts]
        samples.append((key, [], conversation, [], files))
        originals[key] = ([decode_every_sample(data, RATE) for _, data in files], conversation)
    write_crude_dataset(path, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return path, originals


def reference(processor, golden, waveforms, conversation):
    """The processor's own output: each typed audio part given its decoded waveform."""
    clips = iter(waveforms)
    messages = [
        {
            "role": message["role"],
            "content": [
                {"type": "audio", "audio": next(clips)} if part["type"] == "audio" else part
                for part in message["content"]
            ],
        }
        for message in golden.hf_messages(conversation, [])
    ]
    return processor.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"sampling_rate": RATE},
    )


@pytest.mark.parametrize("family", ["qwen2-audio", "qwen2.5-omni", "qwen3-omni"])
def test_audio_tracks_of_videos_equal_the_processors_output(
    family, processor_dirs, video_audio_data, make_datamodule, every_batch, golden
):
    from transformers import AutoProcessor

    path, originals = video_audio_data
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    spec = family_for(processor)
    dm = make_datamodule(path, processor_dirs[family], processor.tokenizer, packed=False)
    checked, clips = set(), 0
    for batch in every_batch(dm, list(originals)):
        refs = [reference(processor, golden, *originals[key]) for key in batch.__key__]
        visual = batch.visual or {}
        for name in spec.visual:  # the audio features, combined by the family's rule
            parts = [ref[name] for ref in refs if name in ref]
            assert (name in visual) == bool(parts), name
            if parts:
                assert torch.equal(visual[name], spec.combine(name)(parts)), name
        for row, (key, ref) in enumerate(zip(batch.__key__, refs)):
            length = ref["input_ids"].shape[1]
            ids, labels = batch.input_ids[row, :length], batch.labels[row, :length]
            assert torch.equal(ids, ref["input_ids"][0]), key
            golden.check_labels(
                processor.tokenizer,
                ref,
                ids,
                labels,
                golden.answers(originals[key][1]),
                golden.END_OF_TURN[family],
            )
            checked.add(key)
        clips += len(visual["feature_attention_mask"]) if "feature_attention_mask" in visual else 0
    assert checked == set(originals)
    assert clips >= sum(len(waveforms) for waveforms, _ in originals.values())
    assert dm.skip_counts() == {}


def skip_datamodule(path, processor_dir, tok, on_error):
    import energon_plugins

    return energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=1024,
        micro_batch_size=1,
        num_workers=0,
        shuffle_buffer_size=None,
        task_encoder={
            "name": "hf-processor",
            "options": {"processor": str(processor_dir), "on_error": on_error},
        },
        batch_format=None,
    )


@pytest.mark.bad_input
def test_a_video_without_an_audio_track_is_a_counted_skip_naming_the_part(processor_dirs, tmp_path):
    from transformers import AutoProcessor

    write_crude_dataset(
        tmp_path,
        [
            (
                "sound",
                [],
                ask("What?", "A tone."),
                [],
                [("audio.mp4", encode_video_with_tone("mp4", 1.0, 16000))],
            ),
            ("silent", [], ask("What?", "Nothing."), [], [("audio.mp4", encode_video(video_frames(8)))]),
        ],
        fmt="chatml",
        samples_per_shard=1,
        split_ratio=(("train", 1.0),),
    )
    processor_dir = processor_dirs["qwen2-audio"]
    tok = AutoProcessor.from_pretrained(processor_dir, local_files_only=True).tokenizer
    skipping = skip_datamodule(tmp_path, processor_dir, tok, "skip")
    loader = skipping.train_dataloader()
    assert [next(loader).__key__[0] for _ in range(2)] == ["sound", "sound"]
    counts = skipping.skip_counts()  # "silent", each time it comes up
    assert set(counts) == {"audio"} and counts["audio"] >= 1
    raising = skip_datamodule(tmp_path, processor_dir, tok, "raise").train_dataloader()
    with pytest.raises(
        Exception, match=r"audio 'silent\.0\.audio\.mp4' in shard '[^']+' is a video without an audio track"
    ):
        for _ in range(3):
            next(raising)
