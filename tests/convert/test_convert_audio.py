"""``energon-plugins convert`` reads audio in all three built-in source formats.

Real audio files (sine tones written by PyAV as WAV, FLAC, MP3, M4A/AAC and Ogg/Opus) are
referenced by path from LLaVA JSON (``audio`` / ``audios``) and ShareGPT JSON Lines
(``audios``, LLaMA-Factory's key, and typed ``{"type": "audio"}`` parts), and held in a parquet
column as Hugging Face ``Audio`` structs (bytes with a file name, bytes alone, a path alone).
Each source is converted with the real converter; the shards must hold each clip as the
numbered part the encoders read (``0.wav``, ``1.flac``, ...), its original bytes, beside the
images; the parquet output is read back through Energon's own loader and the conversation
cooker, and every clip decodes to exactly what plain PyAV decodes from the original file.
The bad-input table: wrong extensions, paths leaving the media folder, placeholder counts that
differ from the clips, unreadable audio columns, each a rejected record with its reason and a
message naming the field.
"""

import io
import json
import os
import tarfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from click.testing import CliRunner

from energon_plugins import convert_dataset
from energon_plugins.cli import cli
from energon_plugins.convert.report import read_report
from energon_plugins.testing import (
    decode_every_sample,
    encode_tone,
    encode_video,
    encode_video_with_tone,
    video_frames,
)
from tests._convert_sources import image_bytes
from tests._refusals import assert_refusal, unchanged

RATE = 16000
ASK = [{"from": "gpt", "value": "A tone."}]
TONES = {  # file name -> (extension, seconds, sampling rate, tone Hz)
    "a.wav": ("wav", 0.6, 16000, 440),
    "b.flac": ("flac", 0.8, 22050, 330),
    "c.mp3": ("mp3", 0.5, 44100, 550),
    "d.m4a": ("m4a", 0.7, 24000, 660),
    "e.ogg": ("ogg", 0.4, 48000, 700),
}


def human(text):
    return [{"from": "human", "value": text}, *ASK]


def aiff_bytes() -> bytes:
    """A short AIFF file: real audio in a container the encoders do not take."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="aiff") as out:
        stream = out.add_stream("pcm_s16be", rate=8000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A media folder of real audio files (and what must stay out of reach), ``(root, bytes)``."""
    root = tmp_path_factory.mktemp("audio-src")
    folder = root / "media"
    (folder / "clips" / "dir.wav").mkdir(parents=True)
    files = {f"clips/{name}": encode_tone(*spec) for name, spec in TONES.items()}
    files["clips/x.aac"] = files["clips/a.wav"]
    files["clips/noext"] = files["clips/a.wav"]
    files["clips/picture.wav"] = image_bytes("png", (8, 8), 1)
    files["pic.jpg"] = image_bytes("jpg", (24, 16), 2)
    files["clips/talk.mkv"] = encode_video_with_tone("mkv", 0.5, 16000, 440)
    files["clips/silent.mp4"] = encode_video(video_frames(4, (32, 32)), container="mp4")
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (root / "outside.wav").write_bytes(files["clips/a.wav"])
    (folder / "clips" / "link.wav").symlink_to(root / "outside.wav")
    return folder, files


def shard_samples(output: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of the output's shards: ``key -> {part: bytes}``."""
    samples: dict[str, dict[str, bytes]] = {}
    for shard in sorted(output.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                key, _, part = member.name.partition(".")
                samples.setdefault(key, {})[part] = tar.extractfile(member).read()
    return samples


def by_id(output: Path) -> dict[str, dict[str, bytes]]:
    """The output's samples keyed by their record's id."""
    return {json.loads(parts["json"])["id"]: parts for parts in shard_samples(output).values()}


# ----------------------------------------------------------------------------- the three sources
def write_llava(folder: Path, path: Path) -> None:
    records = [
        {"id": "one", "audio": "clips/a.wav", "conversations": human("<audio>\nWhat do you hear?")},
        {
            "id": "two+image",
            "image": "pic.jpg",
            "audios": ["clips/b.flac", "clips/c.mp3"],
            "conversations": human("<image>\n<audio><audio>Which is lower?"),
        },
        {"id": "text", "conversations": human("Say hello.")},
        {"id": "in-video", "audio": "clips/talk.mkv", "conversations": human("<audio>Who speaks?")},
        # bad records: id -> the reason and names the table expects
        {"id": "ext-aac", "audio": "clips/x.aac", "conversations": human("<audio>")},
        {"id": "no-ext", "audio": "clips/noext", "conversations": human("<audio>")},
        {"id": "dotdot", "audio": "../outside.wav", "conversations": human("<audio>")},
        {"id": "absolute", "audio": str(folder.parent / "outside.wav"), "conversations": human("<audio>")},
        {"id": "link-out", "audio": "clips/link.wav", "conversations": human("<audio>")},
        {"id": "url", "audio": "https://example.com/a.wav", "conversations": human("<audio>")},
        {
            "id": "two-clips-one-tag",
            "audios": ["clips/a.wav", "clips/b.flac"],
            "conversations": human("<audio>"),
        },
        {"id": "tag-no-clip", "conversations": human("<audio>Hear this?")},
        {"id": "missing", "audio": "clips/nope.wav", "conversations": human("<audio>")},
        {"id": "folder", "audio": "clips/dir.wav", "conversations": human("<audio>")},
        {"id": "not-audio", "audio": "clips/picture.wav", "conversations": human("<audio>")},
        {"id": "number", "audios": [3], "conversations": human("<audio>")},
        {"id": "silent-video", "audio": "clips/silent.mp4", "conversations": human("<audio>")},
    ]
    path.write_text(json.dumps(records))


def write_sharegpt(path: Path) -> None:
    ask = {"role": "assistant", "content": "A tone."}
    records = [
        {  # LLaMA-Factory's layout: ``audios`` beside typed content parts
            "id": "typed",
            "messages": [
                {"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "Pitch?"}]},
                ask,
            ],
            "audios": ["clips/d.m4a"],
        },
        {
            "id": "tagged",
            "system": "You listen.",
            "messages": [{"role": "user", "content": "<sound> and <sound>: same?"}, ask],
            "audios": ["clips/e.ogg", "clips/a.wav"],
        },
        {
            "id": "sg-ext",
            "messages": [{"role": "user", "content": "<sound>"}, ask],
            "audios": ["clips/x.aac"],
        },
        {
            "id": "sg-out",
            "messages": [{"role": "user", "content": "<sound>"}, ask],
            "audios": ["../outside.wav"],
        },
        {
            "id": "sg-typed-mismatch",
            "messages": [{"role": "user", "content": [{"type": "audio"}, {"type": "audio"}]}, ask],
            "audios": ["clips/a.wav"],
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_parquet(folder: Path, root: Path, files: dict[str, bytes]) -> None:
    """Two parquet files: ``Audio`` structs in ``audio``, and one whose ``audio`` is numbers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    turn = pa.struct([("role", pa.string()), ("content", pa.string())])

    def chat(text):
        return [{"role": "user", "content": text}, {"role": "assistant", "content": "A tone."}]

    rows = [
        ("named-bytes", chat("<audio>Pitch?"), {"bytes": files["clips/b.flac"], "path": "tone.flac"}),
        ("bare-bytes", chat("<audio>Pitch?"), {"bytes": files["clips/c.mp3"], "path": None}),
        ("path-only", chat("<audio>Pitch?"), {"bytes": None, "path": "clips/d.m4a"}),
        ("no-audio", chat("Say hello."), None),
        ("pq-garbage", chat("<audio>"), {"bytes": b"not audio at all", "path": None}),
        ("pq-neither", chat("<audio>"), {"bytes": None, "path": None}),
        ("pq-aac-name", chat("<audio>"), {"bytes": files["clips/a.wav"], "path": "clip.aac"}),
        ("pq-aiff", chat("<audio>"), {"bytes": aiff_bytes(), "path": None}),
        ("pq-out", chat("<audio>"), {"bytes": None, "path": "../outside.wav"}),
        ("pq-mismatch", chat("<audio><audio>"), {"bytes": files["clips/a.wav"], "path": "a.wav"}),
    ]
    audio = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("id", pa.string()), ("messages", pa.list_(turn)), ("audio", audio)])
    table = pa.Table.from_pylist([dict(zip(schema.names, row)) for row in rows], schema=schema)
    pq.write_table(table, root / "a.parquet")
    numbers = pa.schema([("id", pa.string()), ("messages", pa.list_(turn)), ("audio", pa.int64())])
    pq.write_table(
        pa.Table.from_pylist([{"id": "pq-number", "messages": chat("<audio>"), "audio": 7}], schema=numbers),
        root / "b.parquet",
    )


@pytest.fixture(scope="module")
def converted(media, tmp_path_factory):
    """Each format converted once: ``format -> output folder`` (LLaVA and parquet through the
    Python API, ShareGPT through the command line with its own audio placeholder)."""
    folder, files = media
    root = tmp_path_factory.mktemp("audio-out")
    common = {"split_ratio": "train=1", "workers": 0, "max_rejected": "100%"}
    write_llava(folder, root / "llava.json")
    convert_dataset(
        root / "llava.json", root / "llava", "llava-json", options={"image_folder": str(folder)}, **common
    )
    write_sharegpt(root / "chat.jsonl")
    args = ["convert", str(root / "chat.jsonl"), str(root / "sharegpt"), "--from", "sharegpt"]
    args += ["-o", f"image_folder={folder}", "--audio-token", "<sound>", "--split-ratio", "train=1"]
    run = CliRunner().invoke(cli, [*args, "--workers", "0", "--max-rejected", "100%"])
    assert run.exit_code == 0, run.output
    (root / "pq").mkdir()
    write_parquet(folder, root / "pq", files)
    convert_dataset(
        root / "pq", root / "parquet", "hf-parquet", options={"image_folder": str(folder)}, **common
    )
    return {"llava-json": root / "llava", "sharegpt": root / "sharegpt", "hf-parquet": root / "parquet"}


# ----------------------------------------------------------------------------- good records
def test_llava_clips_are_numbered_parts_with_their_original_bytes(converted, media):
    _, files = media
    samples = by_id(converted["llava-json"])
    assert set(samples) == {"one", "two+image", "text", "in-video"}
    # a video's sound track is the part N.audio.<ext>, which the cooker never takes for a video
    assert sorted(samples["in-video"]) == ["0.audio.mkv", "json"]
    assert samples["in-video"]["0.audio.mkv"] == files["clips/talk.mkv"]
    assert samples["one"]["0.wav"] == files["clips/a.wav"]
    two = samples["two+image"]
    assert sorted(two) == ["0.flac", "0.jpg", "1.mp3", "json"]
    assert (two["0.flac"], two["1.mp3"], two["0.jpg"]) == (
        files["clips/b.flac"],
        files["clips/c.mp3"],
        files["pic.jpg"],
    )
    assert sorted(samples["text"]) == ["json"]
    turns = json.loads(two["json"])["conversations"]
    assert turns[0]["value"] == "<image>\n<audio><audio>Which is lower?"


def test_sharegpt_reads_audios_typed_parts_and_its_own_placeholder(converted, media):
    _, files = media
    samples = by_id(converted["sharegpt"])
    assert set(samples) == {"typed", "tagged"}
    assert samples["typed"]["0.m4a"] == files["clips/d.m4a"]
    first = json.loads(samples["typed"]["json"])["conversations"][0]["value"]
    assert first == "<sound>\nPitch?"  # the typed audio part became the placeholder given
    tagged = samples["tagged"]
    assert (tagged["0.ogg"], tagged["1.wav"]) == (files["clips/e.ogg"], files["clips/a.wav"])
    assert json.loads(tagged["json"])["conversations"][0] == {"from": "system", "value": "You listen."}
    state = json.loads((converted["sharegpt"] / "convert.json").read_text())
    assert state["settings"]["audio_token"] == "<sound>"
    llava_state = json.loads((converted["llava-json"] / "convert.json").read_text())
    assert "audio_token" not in llava_state["settings"]  # at its default: older runs still resume


def test_parquet_clips_decode_through_energons_loader_as_plain_pyav_decodes_them(converted, media):
    """The ``Audio`` column's clips (bytes with a name, bytes alone, a path alone) come back
    through Energon's loader and the conversation cooker, and decode sample for sample."""
    from energon_plugin_hf_processor.audio import decode_audio
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_train_dataset

    from energon_plugins.encoding.chat.chatml import CHATML_COOKER

    _, files = media
    samples = by_id(converted["hf-parquet"])
    assert set(samples) == {"named-bytes", "bare-bytes", "path-only", "no-audio"}
    parts = {key: sorted(p for p in value if p != "json") for key, value in samples.items()}
    assert parts == {
        "named-bytes": ["0.flac"],  # the struct's path names the extension
        "bare-bytes": ["0.mp3"],  # no name: the container's
        "path-only": ["0.m4a"],  # read from the media folder
        "no-audio": [],
    }
    originals = {
        "named-bytes": files["clips/b.flac"],
        "bare-bytes": files["clips/c.mp3"],
        "path-only": files["clips/d.m4a"],
    }

    class Cooked(DefaultTaskEncoder):
        cookers = [CHATML_COOKER]

        def encode_sample(self, sample):
            return sample

        def batch(self, samples):
            return samples

    loader = get_loader(
        get_train_dataset(
            str(converted["hf-parquet"]),
            batch_size=1,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
            task_encoder=Cooked(),
        )
    )
    ids = {
        key: json.loads(parts["json"])["id"] for key, parts in shard_samples(converted["hf-parquet"]).items()
    }
    seen = {}
    for (sample,) in loader:
        seen[ids[sample.__key__]] = sample
        if len(seen) == len(samples):
            break
    for ident, data in originals.items():
        sample = seen[ident]
        assert len(sample.audios) == 1 and sample.audio_parts == parts[ident]
        decoded = decode_audio(sample.audios[0], sample.audio_parts[0], RATE)
        expected = decode_every_sample(data, RATE)
        assert decoded.shape == expected.shape and np.allclose(decoded, expected, atol=1e-6), ident
        seconds = TONES[{"named-bytes": "b.flac", "bare-bytes": "c.mp3", "path-only": "d.m4a"}[ident]][1]
        assert abs(len(decoded) / RATE - seconds) < 0.1, ident
    assert seen["no-audio"].audios == []


# ----------------------------------------------------------------------------- the bad-input table
BAD = [
    # (format, record id, reason, what the message names)
    ("llava-json", "ext-aac", "audio_format", ["audio:", "x.aac", ".aac", "wav, flac, mp3, m4a, ogg"]),
    ("llava-json", "no-ext", "audio_format", ["audio:", "noext", "no extension"]),
    ("llava-json", "dotdot", "outside_folder", ["audio:", "../outside.wav", "outside the media folder"]),
    ("llava-json", "absolute", "outside_folder", ["audio:", "outside.wav", "outside the media folder"]),
    ("llava-json", "link-out", "outside_folder", ["audio:", "link.wav", "outside the media folder"]),
    ("llava-json", "url", "url", ["audio:", "https://example.com/a.wav"]),
    ("llava-json", "two-clips-one-tag", "placeholder_mismatch", ["1 '<audio>' placeholder", "2 audio clip"]),
    ("llava-json", "tag-no-clip", "placeholder_mismatch", ["1 '<audio>' placeholder", "0 audio clip"]),
    ("llava-json", "missing", "missing_audio", ["audio:", "nope.wav", "cannot read audio"]),
    ("llava-json", "folder", "not_a_file", ["audio:", "dir.wav", "a directory"]),
    ("llava-json", "not-audio", "undecodable_audio", ["audio 0", "no audio stream"]),
    ("llava-json", "number", "malformed", ["audios[0]", "int"]),
    ("llava-json", "silent-video", "undecodable_audio", ["audio 0", "no audio stream"]),
    ("sharegpt", "sg-ext", "audio_format", ["audios[0]", "x.aac"]),
    ("sharegpt", "sg-out", "outside_folder", ["audios[0]", "../outside.wav"]),
    ("sharegpt", "sg-typed-mismatch", "placeholder_mismatch", ["2 '<sound>' placeholder", "1 audio clip"]),
    ("hf-parquet", "pq-garbage", "undecodable_audio", ["audio 0", "does not decode"]),
    ("hf-parquet", "pq-neither", "missing_audio", ["audio:", "neither bytes nor a path"]),
    ("hf-parquet", "pq-aac-name", "audio_format", ["audio.path", "clip.aac"]),
    ("hf-parquet", "pq-aiff", "audio_format", ["audio 0", "'aiff'", "without a file name"]),
    ("hf-parquet", "pq-out", "outside_folder", ["audio.path", "../outside.wav"]),
    ("hf-parquet", "pq-mismatch", "placeholder_mismatch", ["2 '<audio>' placeholder", "1 audio clip"]),
    ("hf-parquet", "pq-number", "malformed", ["audio:", "int", "expected a path, bytes or {bytes, path}"]),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("fmt, ident, reason, names", BAD, ids=[row[1] for row in BAD])
def test_bad_audio_is_a_rejected_record_with_its_reason(converted, fmt, ident, reason, names):
    report = converted[fmt] / "rejected.jsonl"
    rows = [row for row in read_report(report) if row["id"] == ident]
    assert len(rows) == 1, (ident, rows)
    assert rows[0]["reason"] == reason, rows[0]
    for name in names:
        assert name in rows[0]["message"], (name, rows[0]["message"])
    assert ident not in by_id(converted[fmt])


def test_every_bad_record_of_each_source_is_in_the_table(converted):
    """The table covers the whole report (no bad record rejected for a reason left unchecked)."""
    for fmt, output in converted.items():
        reported = {row["id"] for row in read_report(output / "rejected.jsonl")}
        assert reported == {ident for f, ident, _, _ in BAD if f == fmt}, fmt


CLI_BAD = [
    # (extra arguments, source format, what the message names)
    (["--audio-token", "<image>"], "llava-json", ["audio_token", "image_token", "'<image>'"]),
    (["-o", "audios_column=sound"], "hf-parquet", ["'sound'", "audios", "columns:"]),
    (["-o", "audio_field=sound"], "sharegpt", ["audio_field", "audios_field"]),
    (["--audio-token", ""], "llava-json", ["audio_token"]),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "extra, fmt, names", CLI_BAD, ids=["same-token", "no-column", "unknown-option", "empty-token"]
)
def test_bad_audio_settings_are_refused_on_the_command_line(media, tmp_path, extra, fmt, names):
    folder, files = media
    source = tmp_path / "src"
    source.mkdir()
    if fmt == "hf-parquet":
        write_parquet(folder, source, files)
    else:
        (source / "data.jsonl").write_text(
            json.dumps({"id": "one", "audio": "clips/a.wav", "conversations": human("<audio>")}) + "\n"
        )
    output = tmp_path / "out"
    args = ["convert", str(source), str(output), "--from", fmt, "-o", f"image_folder={folder}", *extra]
    with unchanged(source, folder):
        run = CliRunner().invoke(cli, [*args, "--workers", "0"])
    assert run.exit_code != 0
    assert_refusal(run.output, *names, one_paragraph=False)
    assert not any(output.glob("*.tar"))


def test_the_converters_audio_extensions_are_the_encoders():
    from energon_plugins.convert.formats import audio
    from energon_plugins.encoding.chat import chatml

    assert audio.AUDIO_EXTENSIONS == chatml.AUDIO_EXTENSIONS
    assert (audio.VIDEO_EXTENSIONS, audio.AUDIO_IN_VIDEO) == (chatml.VIDEO_EXTENSIONS, chatml.AUDIO_IN_VIDEO)
    assert chatml.audio_parts({"0.audio.mkv": b"", "1.wav": b"", "0.mp4": b""}) == ["0.audio.mkv", "1.wav"]
