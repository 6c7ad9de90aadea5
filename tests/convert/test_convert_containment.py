"""``convert`` reads only what it should: media inside the media folder, regular files under caps,
JSON records within a size and a depth.

The escape test writes a real LLaVA JSON source whose records point everywhere a record should
not reach (``../``, absolute paths, a symlink leading out, ``/dev/zero``, a FIFO, a folder,
URLs, a sparse file over the size cap, PNG headers declaring huge sizes, a record nested
200,000 deep, a record over the record cap) and converts it in a child process that logs every
file it opens (``sys.addaudithook``: Python's ``open``/``os.open`` event). What that proves: the
conversion finished (a FIFO without a writer blocks whoever opens it blocking), each bad record
is in the report with its own reason and a message naming the record field and the path, and
no refused path was opened through Python (the images are decoded from bytes, so PIL opens no
path). A file made unreadable with ``chmod 000`` would prove nothing here: the tests run as root.

The memory bounds of the JSON reader are checked with ``tracemalloc``; its time being linear in a
long string's length is a timing figure, measured by ``benchmarks/convert/convert_long_records.py``
rather than asserted here.
"""

import json
import os
import struct
import subprocess
import sys
import tarfile
import tracemalloc
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from click.testing import CliRunner

from energon_plugins import ConvertError, RecordError, convert_dataset
from energon_plugins.cli import cli
from energon_plugins.convert.checks import check_image
from energon_plugins.convert.formats.json_stream import (
    decode_payload,
    iter_json_records,
)
from energon_plugins.convert.formats.media import (
    MediaLimits,
    current_media_limits,
    media_limits,
)
from energon_plugins.convert.records import REASONS
from energon_plugins.convert.report import read_report
from tests._convert_sources import image_bytes

TAG = "<image>"
ONE_TURN = [{"from": "human", "value": f"{TAG}\nWhat is it?"}, {"from": "gpt", "value": "A box."}]


def png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares ``width`` x ``height`` (its pixel data is not there)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def shard_images(output: Path) -> list[bytes]:
    """Every image part in the output's shards."""
    images = []
    for shard in sorted(output.glob("*.tar")):
        with tarfile.open(shard) as tar:
            images += [
                tar.extractfile(member).read()
                for member in tar.getmembers()
                if not member.name.endswith(".json")
            ]
    return images


def nested(levels: int) -> str:
    """A JSON value ``levels`` arrays deep."""
    return "[" * levels + "]" * levels


AUDITED_CONVERT = """
import json, os, sys
opened = []
def log_opens(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes)):
        opened.append(os.path.realpath(os.fsdecode(args[0])))
sys.addaudithook(log_opens)
from energon_plugins import convert_dataset
result = convert_dataset(sys.argv[1], sys.argv[2], "llava-json", options=json.loads(sys.argv[3]),
                         split_ratio="train=1", shard_size="16KiB", workers=0)
with open(sys.argv[4], "w") as fh:
    json.dump({"opened": opened, "written": result.written, "rejected": result.rejected}, fh)
"""


@pytest.fixture(scope="module")
def escapes(tmp_path_factory):
    """The escape source converted under the audit hook: ``(paths, expected reasons by location,
    report rows by location, the child's log)``."""
    root = tmp_path_factory.mktemp("escapes")
    images, outside = root / "images", root / "outside"
    images.mkdir()
    outside.mkdir()
    paths = {
        "good": images / "good.jpg",
        "secret": outside / "secret.jpg",
        "fifo": images / "pipe.jpg",
        "huge": images / "huge.jpg",
        "folder": images / "folder.jpg",
        "bomb": images / "bomb.png",
        "tall": images / "tall.png",
        "link_out": images / "link.jpg",
        "link_in": images / "alias.jpg",
    }
    paths["good"].write_bytes(image_bytes("jpg", (32, 24), 1))
    paths["secret"].write_bytes(image_bytes("jpg", (40, 30), 2))
    os.mkfifo(paths["fifo"])
    with paths["huge"].open("wb") as fh:  # sparse: 64 MiB + 1 byte, nothing written
        fh.truncate(64 * 2**20 + 1)
    paths["folder"].mkdir()
    paths["bomb"].write_bytes(png_declaring(100_000, 100_000))  # past Pillow's own guard
    paths["tall"].write_bytes(png_declaring(9000, 9000))  # 81 M pixels: under Pillow's, over ours
    paths["link_out"].symlink_to(paths["secret"])
    paths["link_in"].symlink_to(paths["good"])
    cases = [
        (None, {"image": "good.jpg"}),
        (None, {"image": "alias.jpg"}),  # a symlink that stays inside: fine
        (None, {"image": str(paths["good"])}),  # an absolute path inside the folder: fine
        ("outside_folder", {"image": "../outside/secret.jpg"}),
        ("outside_folder", {"image": str(paths["secret"])}),
        ("outside_folder", {"image": "link.jpg"}),
        ("outside_folder", {"image": "/etc/hostname"}),
        ("outside_folder", {"image": "/dev/zero"}),
        ("outside_folder", {"images": ["good.jpg", "../../../../../etc/passwd"]}),
        ("not_a_file", {"image": "pipe.jpg"}),
        ("not_a_file", {"image": "folder.jpg"}),
        ("url", {"image": "http://example.com/cat.jpg"}),
        ("url", {"image": "s3://bucket/cat.jpg"}),
        ("url", {"image": "file:///etc/hostname"}),
        ("too_large", {"image": "huge.jpg"}),
        ("too_many_pixels", {"image": "bomb.png"}),
        ("too_many_pixels", {"image": "tall.png"}),
        ("missing_image", {"image": "nope.jpg"}),
    ]
    records = []
    for reason, fields in cases:
        turns = (
            ONE_TURN
            if "image" in fields
            else [{"from": "human", "value": f"{TAG}{TAG}\nCompare."}, {"from": "gpt", "value": "Same."}]
        )
        record = {"id": f"r{len(records)}", **fields, "conversations": turns}
        records.append((reason, json.dumps(record)))
    records.append(("too_deep", '{"id": "deep", "conversations": ' + nested(200_000) + "}"))
    records.append(
        (
            "record_too_large",
            json.dumps(
                {
                    "id": "big",
                    "conversations": [
                        {"from": "human", "value": "x" * (2 * 2**20)},
                        {"from": "gpt", "value": "y"},
                    ],
                }
            ),
        )
    )
    records.append((None, json.dumps({"id": "last", "image": "good.jpg", "conversations": ONE_TURN})))
    source = root / "data.json"
    source.write_text("[\n" + ",\n".join(text for _, text in records) + "\n]\n")
    log = root / "log.json"
    options = {"image_folder": str(images), "max_record_bytes": "1MiB"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            AUDITED_CONVERT,
            str(source),
            str(root / "out"),
            json.dumps(options),
            str(log),
        ],
        check=True,
        timeout=240,
    )
    expected = {f"data.json:#{i}": reason for i, (reason, _) in enumerate(records)}
    rows = {row["location"]: row for row in read_report(root / "out" / "rejected.jsonl")}
    return paths, expected, rows, json.loads(log.read_text())


def test_every_escape_is_rejected_with_its_own_reason(escapes):
    _, expected, rows, log = escapes
    rejected = {location: reason for location, reason in expected.items() if reason}
    assert {location: row["reason"] for location, row in rows.items()} == rejected
    assert log["written"] == {"train": sum(1 for r in expected.values() if r is None)}
    assert set(log["rejected"]) <= set(REASONS)


def test_messages_name_the_record_field_and_the_path(escapes):
    _, _, rows, _ = escapes
    by_id = {row["id"]: row["message"] for row in rows.values()}
    assert by_id["r3"].startswith("image: '../outside/secret.jpg' resolves to")
    assert "outside the media folder" in by_id["r3"] and "--allow-outside" in by_id["r3"]
    assert by_id["r8"].startswith("images[1]: '../../../../../etc/passwd'")
    assert by_id["r9"].startswith("image: '") and "pipe.jpg' is a FIFO" in by_id["r9"]
    assert "folder.jpg" in by_id["r10"] and "a directory" in by_id["r10"]
    assert by_id["r11"] == (
        "image: 'http://example.com/cat.jpg' is a URL; convert reads local "
        "files only (download the media first)"
    )
    assert by_id["r14"].startswith("image: '") and "huge.jpg' is 67108865 bytes" in by_id["r14"]
    assert "--max-image-size" in by_id["r14"]
    assert "9000x9000" in by_id["r16"] and "--max-image-pixels" in by_id["r16"]
    deep = next(row for row in rows.values() if row["reason"] == "too_deep")
    assert "200001 levels deep" in deep["message"] and "max_depth=64" in deep["message"]
    big = next(row for row in rows.values() if row["reason"] == "record_too_large")
    assert "max_record_bytes=1048576" in big["message"]


def test_refused_files_are_never_opened(escapes):
    """The child logged its opens: the good image was read through the same code (so the log
    sees those reads); no refused path was opened (the FIFO has no writer: opening it blocking
    would have hung the child, which the fixture's timeout turns into a failure)."""
    paths, _, _, log = escapes
    opened = set(log["opened"])
    assert str(paths["good"].resolve()) in opened
    refused = [paths[k] for k in ("secret", "fifo", "huge", "folder")]
    refused += [Path("/etc/hostname"), Path("/etc/passwd"), Path("/dev/zero")]
    assert not opened & {os.path.realpath(p) for p in refused}


def test_limits_are_back_to_the_defaults_after_a_conversion(tmp_path):
    """The pixel cap given to convert_dataset applies (in this process: workers=0) and is
    scoped to each record's load: no process-wide leftover afterwards."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "big.jpg").write_bytes(image_bytes("jpg", (20, 20), 3))
    (folder / "small.jpg").write_bytes(image_bytes("jpg", (10, 10), 4))
    (folder / "data.json").write_text(
        json.dumps([{"image": name, "conversations": ONE_TURN} for name in ("big.jpg", "small.jpg")])
    )
    result = convert_dataset(
        folder / "data.json",
        tmp_path / "out",
        "llava-json",
        workers=0,
        split_ratio="train=1",
        max_image_pixels=200,
    )
    assert result.rejected == {"too_many_pixels": 1} and result.written == {"train": 1}
    assert current_media_limits() == MediaLimits()


# ----------------------------------------------------------------------------- --allow-outside
def test_allow_outside_admits_absolute_paths_but_keeps_every_other_check(tmp_path):
    data, elsewhere, beyond = tmp_path / "data", tmp_path / "elsewhere", tmp_path / "beyond"
    for folder in (data, elsewhere, beyond):
        folder.mkdir()
    photo = image_bytes("jpg", (36, 28), 5)
    (elsewhere / "photo.jpg").write_bytes(photo)
    (beyond / "hidden.jpg").write_bytes(image_bytes("jpg", (30, 30), 6))
    (elsewhere / "sneaky.jpg").symlink_to(beyond / "hidden.jpg")
    os.mkfifo(elsewhere / "pipe.jpg")
    records = [
        {"id": name, "image": str(path), "conversations": ONE_TURN}
        for name, path in (
            ("abs", elsewhere / "photo.jpg"),
            ("link", elsewhere / "sneaky.jpg"),
            ("fifo", elsewhere / "pipe.jpg"),
            ("dev", Path("/dev/zero")),
        )
    ]
    (data / "data.json").write_text(json.dumps(records))
    runner = CliRunner()
    base = [
        "convert",
        str(data / "data.json"),
        "--from",
        "llava-json",
        "--split-ratio",
        "train=1",
        "--max-rejected",
        "100%",
        "--workers",
        "0",
    ]

    refused = runner.invoke(cli, [*base[:2], str(tmp_path / "out0"), *base[2:]])
    assert refused.exit_code == 1, refused.output  # nothing reached train
    assert {r["id"]: r["reason"] for r in read_report(tmp_path / "out0" / "rejected.jsonl")} == {
        "abs": "outside_folder",
        "link": "outside_folder",
        "fifo": "outside_folder",
        "dev": "outside_folder",
    }

    allowed = runner.invoke(
        cli,
        [
            *base[:2],
            str(tmp_path / "out1"),
            *base[2:],
            "--allow-outside",
            str(elsewhere),
            "--allow-outside",
            "/dev",
        ],
    )
    assert allowed.exit_code == 0, allowed.output
    assert {r["id"]: r["reason"] for r in read_report(tmp_path / "out1" / "rejected.jsonl")} == {
        "link": "outside_folder",
        "fifo": "not_a_file",
        "dev": "not_a_file",
    }
    assert shard_images(tmp_path / "out1") == [photo]

    missing = runner.invoke(
        cli, [*base[:2], str(tmp_path / "out2"), *base[2:], "--allow-outside", str(tmp_path / "nowhere")]
    )
    assert missing.exit_code == 2 and "nowhere" in missing.output
    assert "Traceback" not in missing.output


def test_the_cli_documents_the_new_options_and_reasons():
    result = CliRunner().invoke(cli, ["convert", "--help"])
    for text in (
        "--allow-outside",
        "--max-image-size",
        "--max-image-pixels",
        "max_record_bytes",
        "max_depth",
        "outside_folder",
        "not_a_file",
        "too_many_pixels",
        "too_deep",
    ):
        assert text in result.output


# ----------------------------------------------------------------------------- pixels and bytes
@pytest.mark.parametrize("declared", [(100_000, 100_000), (9000, 9000), (12_000, 12_000)])
def test_pixel_bombs_are_refused_from_the_header(declared):
    with pytest.raises(RecordError) as caught:
        check_image(png_declaring(*declared), 0, reencode="png")
    assert caught.value.reason == "too_many_pixels" and "not decoded" in caught.value.message


def test_the_pixel_cap_is_a_setting():
    small = image_bytes("png", (64, 64), 7)
    assert check_image(small, 0, None)[1] == small
    with pytest.raises(RecordError, match="64x64 = 4096 pixels, more than the 4000"):
        check_image(small, 0, None, max_pixels=4000)
    with media_limits(MediaLimits(max_image_pixels=4000)), pytest.raises(RecordError):
        check_image(small, 0, None)


def test_parquet_bytes_obey_the_image_cap(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "pq"
    folder.mkdir()
    small, large = image_bytes("png", (8, 8), 1), image_bytes("jpg", (300, 300), 2)
    assert len(small) < 1024 < len(large)
    struct_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    chat = [{"role": "user", "content": f"{TAG} what?"}, {"role": "assistant", "content": "This."}]
    rows = [
        {"id": "small", "pics": [{"bytes": small, "path": None}], "messages": chat},
        {"id": "large", "pics": [{"bytes": large, "path": None}], "messages": chat},
        {"id": "path", "pics": [{"bytes": None, "path": "../secret.png"}], "messages": chat},
    ]
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("pics", pa.list_(struct_type)),
            ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "train.parquet")
    (tmp_path / "secret.png").write_bytes(small)
    result = convert_dataset(
        folder,
        tmp_path / "out",
        "hf-parquet",
        options={"images_column": "pics"},
        split_ratio="train=1",
        max_image_size="1KiB",
        workers=0,
    )
    rows = {r["id"]: r for r in read_report(result.report)}
    assert {i: r["reason"] for i, r in rows.items()} == {"large": "too_large", "path": "outside_folder"}
    assert rows["large"]["message"].startswith("pics[0]: the embedded image is")
    assert rows["path"]["message"].startswith("pics[0].path: '../secret.png'")
    assert shard_images(tmp_path / "out") == [small]


# ----------------------------------------------------------------------------- JSON records
def _peak_reading(path: Path, **caps) -> tuple[list, int]:
    """Each record of ``path`` (a dict or the RecordError), and the traced memory peak of reading
    them all (framing and decoding)."""
    out = []
    tracemalloc.start()
    try:
        for _, payload in iter_json_records(path, path.name, **caps):
            try:
                out.append(decode_payload(payload))
            except RecordError as exc:
                out.append(exc)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_a_deep_record_is_rejected_in_bounded_memory(tmp_path, layout):
    """A million nested arrays (2 MB) is one too_deep record: never parsed, never a
    RecursionError; the records around it still come through."""
    records = ['{"n": 1}', '{"deep": ' + nested(10**6) + "}", '{"n": 2}']
    path = tmp_path / f"deep.{layout}"
    path.write_text("[" + ",".join(records) + "]" if layout == "json" else "\n".join(records))
    out, peak = _peak_reading(path)
    assert out[0] == {"n": 1} and out[2] == {"n": 2}
    assert isinstance(out[1], RecordError) and out[1].reason == "too_deep"
    assert peak < 16 * 2**20


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_a_huge_record_is_skipped_without_being_held(tmp_path, layout):
    """A 24 MiB record under a 1 MiB cap: rejected; memory stays near the cap plus a read chunk."""
    records = ['{"n": 1}', json.dumps({"text": "z" * (24 * 2**20)}), '{"n": 2}']
    path = tmp_path / f"huge.{layout}"
    path.write_text("[" + ",".join(records) + "]" if layout == "json" else "\n".join(records))
    out, peak = _peak_reading(path, max_record_bytes=2**20)
    assert out[0] == {"n": 1} and out[2] == {"n": 2}
    assert isinstance(out[1], RecordError) and out[1].reason == "record_too_large"
    assert "max_record_bytes=1048576" in out[1].message
    assert peak < 6 * 2**20


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_a_long_string_is_read_once_in_memory_proportional_to_it(tmp_path, layout):
    """An 8 MiB string (a 12 MiB record) with escapes across read chunks: read back exactly,
    peak memory a small multiple of the record."""
    text = ('ab\\"c\n' * (2 * 2**20))[: 8 * 2**20]
    record = json.dumps({"conversations": [{"from": "gpt", "value": text}]})
    path = tmp_path / f"long.{layout}"
    path.write_text(f"[{record}]" if layout == "json" else record + "\n")
    out, peak = _peak_reading(path)
    assert out[0]["conversations"][0]["value"] == text
    assert peak < 5 * len(record)


def test_a_broken_record_is_one_bad_record_and_a_broken_array_names_the_last_good_one(tmp_path):
    path = tmp_path / "data.json"
    path.write_text('[{"n": 1}, {"n": 2 "m": 3}, "text", 4, {"n": 5}, {"a": [}]')
    out = []
    broken = r"data.json: invalid JSON after record #4 \('}' closes a '\['\)"
    with pytest.raises(ConvertError, match=broken):
        for _, payload in iter_json_records(path, "data.json"):
            try:
                out.append(decode_payload(payload))
            except RecordError as exc:
                out.append(exc.reason)
    assert out == [{"n": 1}, "malformed", "malformed", "malformed", {"n": 5}]
    path.write_text('[{"n": 1}, {"n": "unterminated')
    with pytest.raises(ConvertError, match=r"after record #0 \(the file ends inside a record\)"):
        list(iter_json_records(path, "data.json"))


def test_record_caps_are_source_format_options(tmp_path):
    from energon_plugins import create

    reader = create("source_format", "sharegpt", {"max_record_bytes": "2KiB", "max_depth": 3})
    assert (reader.options.max_record_bytes, reader.options.max_depth) == (2048, 3)
    path = tmp_path / "chats.jsonl"
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    lines = [
        {"messages": chat},
        {"messages": chat, "meta": {"a": {"b": [1]}}},
        {"messages": chat, "pad": "p" * 4096},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    outcomes = []
    for _, payload in reader.scan(path):
        try:
            outcomes.append(len(reader.load(payload).turns))
        except RecordError as exc:
            outcomes.append(exc.reason)
    assert outcomes == [2, "too_deep", "record_too_large"]
