"""Which parts of a crude conversation sample are audio clips: numbered audio files and
video containers named ``N.audio.<ext>`` (their sound track), never taken for videos."""

from energon_plugins.encoding.chat.chatml import audio_parts, cook_chatml, video_parts


def crude_sample(*parts):
    """A crude sample dict with ``parts`` (part bodies are their names) and one audio turn."""
    turns = [{"from": "human", "value": "<audio><video>What?"}, {"from": "gpt", "value": "A tone."}]
    return {
        "__key__": "k",
        "__restore_key__": (),
        **{part: part.encode() for part in parts},
        "json": {"conversations": turns},
    }


def test_a_video_container_named_audio_is_an_audio_part_not_a_video():
    sample = crude_sample("0.mp4", "2.audio.mkv", "0.audio.mp4", "1.wav", "3.audio.webm", "4.audio.mov")
    assert audio_parts(sample) == ["0.audio.mp4", "1.wav", "2.audio.mkv", "3.audio.webm", "4.audio.mov"]
    assert video_parts(sample) == ["0.mp4"]


def test_only_numbered_audio_infixes_count():
    sample = crude_sample("audio.mp4", "x.audio.mp4", "0.audio.json", "0.sound.mp4", "0.audio.mp4.txt")
    assert audio_parts(sample) == []
    assert video_parts(sample) == []


def test_the_cooked_sample_keeps_the_video_and_the_sound_track_apart():
    cooked = cook_chatml(crude_sample("0.mp4", "0.audio.mp4"))
    assert cooked.videos == [b"0.mp4"] and cooked.video_parts == ["0.mp4"]
    assert cooked.audios == [b"0.audio.mp4"] and cooked.audio_parts == ["0.audio.mp4"]
