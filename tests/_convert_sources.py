"""Small real inputs of each built-in source format, and what each record should become.

Each writer returns a :class:`Source`: the path ``convert`` reads, the options it needs, and
per record location (as the reader names it) either the expected sample (its turns, in the
GPT-style ``from``/``value`` the dataset stores, and its images' original bytes) or the
reason it must be rejected for. Images are real JPEGs and PNGs written with PIL, of varied
sizes.
"""

import dataclasses
import io
import json
import pathlib
from typing import Any

from PIL import Image, ImageDraw

TAG = "<image>"
SPLITS = "train=0.7,val=0.15,test=0.15"
SHARD = "16KiB"


def tree_bytes(output: pathlib.Path) -> dict[str, bytes]:
    """The shards, the report and Energon's split and dataset files: what must be byte-identical."""
    names = [
        *output.glob("*.tar"),
        output / "rejected.jsonl",
        output / ".nv-meta" / "split.yaml",
        output / ".nv-meta" / "dataset.yaml",
    ]
    return {p.name: p.read_bytes() for p in names}


def llava_args(source: "Source", out: pathlib.Path, *extra: str, workers: int = 0) -> list[str]:
    """``convert`` arguments for the LLaVA source of :func:`write_llava_source` into ``out``."""
    return [
        "convert",
        str(source.path),
        str(out),
        "--from",
        "llava-json",
        "-o",
        f"image_folder={source.options['image_folder']}",
        "--split-ratio",
        SPLITS,
        "--shard-size",
        SHARD,
        "--workers",
        str(workers),
        *extra,
    ]


def image_bytes(kind: str, size: tuple[int, int], seed: int) -> bytes:
    """A small JPEG or PNG with a coloured rectangle (distinct per seed)."""
    image = Image.new("RGB", size, ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    ImageDraw.Draw(image).rectangle((2, 2, size[0] // 2, size[1] // 2), fill=(250, 250, 250))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG" if kind == "jpg" else "PNG")
    return buffer.getvalue()


@dataclasses.dataclass
class Source:
    """A written source and what converting it must give."""

    path: pathlib.Path
    options: dict[str, Any]
    good: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """location -> {"conversations": [{"from", "value"}...], "images": [bytes...]}"""
    bad: dict[str, str] = dataclasses.field(default_factory=dict)
    """location -> reason"""


def _gpt(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"from": speaker, "value": text} for speaker, text in turns]


def _expect(source: Source, location: str, turns: list[tuple[str, str]], images: list[bytes]) -> None:
    source.good[location] = {"conversations": _gpt(turns), "images": images}


def write_llava_source(root: pathlib.Path) -> Source:
    """``data.json`` (a JSON array, LLaVA layout) and ``images/``: 20 good records, 7 bad."""
    images = root / "images"
    images.mkdir(parents=True)
    source = Source(root / "data.json", {"image_folder": str(images)})
    records = []
    for i in range(20):
        kind = "jpg" if i % 2 else "png"
        names = [f"{i:03d}.{kind}"] + ([f"{i:03d}b.jpg"] if i == 5 else [])  # 5: two images
        for j, name in enumerate(names):
            (images / name).write_bytes(image_bytes(name[-3:], (24 + 3 * i, 18 + 2 * i + 5 * j), i + 7 * j))
        tags = "\n".join([TAG] * len(names))
        turns = [("human", f"{tags}\nWhat is in picture {i}?"), ("gpt", f"Shape number {i}.")]
        if i % 3 == 0:
            turns += [("human", "And its colour?"), ("gpt", f"Colour {i}.")]
        record = {"id": f"ll-{i}", "conversations": _gpt(turns)}
        record.update({"images": names} if len(names) > 1 else {"image": names[0]})
        records.append(record)
    (images / "broken.jpg").write_bytes(b"\xff\xd8 this is not a jpeg")
    one = _gpt([("human", f"{TAG}\nQ"), ("gpt", "A")])
    bad = [
        ("missing_image", {"image": "nope.jpg", "conversations": one}),
        ("undecodable_image", {"image": "broken.jpg", "conversations": one}),
        ("placeholder_mismatch", {"image": "001.jpg", "conversations": _gpt([("human", "Q"), ("gpt", "A")])}),
        (
            "roles",
            {
                "image": "001.jpg",
                "conversations": _gpt([("human", f"{TAG}\nQ"), ("human", "Q2"), ("gpt", "A")]),
            },
        ),
        (
            "empty_answer",
            {"image": "001.jpg", "conversations": _gpt([("human", f"{TAG}\nQ"), ("gpt", "  ")])},
        ),
        ("malformed", {"image": "001.jpg", "dialogue": []}),
        ("roles", {"image": "001.jpg", "conversations": _gpt([("human", f"{TAG}\nQ"), ("bot", "A")])}),
    ]
    for n, (reason, record) in enumerate(bad):  # spread through the input
        records.insert(3 + 3 * n, {"id": f"bad-{n}", **record})
    for index, record in enumerate(records):
        location = f"data.json:#{index}"
        if record["id"].startswith("bad-"):
            source.bad[location] = bad[int(record["id"][4:])][0]
        else:
            names = record.get("images") or [record["image"]]
            turns = [(t["from"], t["value"]) for t in record["conversations"]]
            _expect(source, location, turns, [(images / n).read_bytes() for n in names])
    source.path.write_text(json.dumps(records, indent=1))
    return source


def write_sharegpt_source(root: pathlib.Path) -> Source:
    """``chats.jsonl`` (JSON Lines, ShareGPT layouts) and pictures beside it: 12 good, 3 bad."""
    root.mkdir(parents=True)
    source = Source(root / "chats.jsonl", {})
    lines = []
    for i in range(12):
        record: dict[str, Any] = {"id": f"sg-{i}"}
        images: list[bytes] = []
        if i % 4 != 3:  # every fourth record is text only
            name = f"pic{i}.{'jpg' if i % 2 else 'png'}"
            (root / name).write_bytes(image_bytes(name[-3:], (30 + i, 26), 100 + i))
            images = [(root / name).read_bytes()]
            record["images"] = [name]
        prompt = f"{TAG}\nDescribe {i}." if images else f"Tell me about {i}."
        answer = f"It is item {i}."
        if i % 3 == 0:  # typed content parts, as chat templates take them
            content: Any = ([{"type": "image"}] if images else []) + [
                {"type": "text", "text": f"Describe {i}." if images else f"Tell me about {i}."}
            ]
            record["messages"] = [
                {"role": "user", "content": content},
                {"role": "assistant", "content": answer},
            ]
        elif i % 3 == 1:
            record["conversations"] = _gpt([("human", prompt), ("gpt", answer)])
        else:
            record["system"] = "Answer briefly."
            record["messages"] = [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": answer},
            ]
        lines.append(json.dumps(record))
        turns = ([("system", "Answer briefly.")] if "system" in record else []) + [
            ("human", prompt),
            ("gpt", answer),
        ]
        _expect(source, f"chats.jsonl:{len(lines)}", turns, images)
    bad = [
        ("malformed", '{"id": "broken", "messages": [{"role": "user"'),
        (
            "placeholder_mismatch",
            json.dumps(
                {
                    "images": ["pic0.png", "pic1.jpg"],
                    "messages": [
                        {"role": "user", "content": f"{TAG} compare"},
                        {"role": "assistant", "content": "Same."},
                    ],
                }
            ),
        ),
        (
            "roles",
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello"},
                        {"role": "user", "content": "Bye"},
                    ]
                }
            ),
        ),
    ]
    for n, (reason, line) in enumerate(bad):
        lines.insert(2 + 4 * n, line)
    # recompute locations (line numbers) after the inserts
    good = list(source.good.values())
    source.good, source.bad = {}, {}
    bad_lines = {line: reason for reason, line in bad}
    for number, line in enumerate(lines, 1):
        if line in bad_lines:
            source.bad[f"chats.jsonl:{number}"] = bad_lines[line]
        else:
            source.good[f"chats.jsonl:{number}"] = good.pop(0)
    source.path.write_text("\n".join(lines) + "\n")
    return source


def write_parquet_source(root: pathlib.Path) -> Source:
    """``root/data/*.parquet``: two files, columns ``uid``, ``chat``, ``pictures`` (image
    structs with bytes), mapped through options: 12 good rows, 2 bad."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "data"
    folder.mkdir(parents=True)
    source = Source(folder, {"turns_column": "chat", "images_column": "pictures", "id_column": "uid"})
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema(
        [
            ("uid", pa.string()),
            ("chat", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("pictures", pa.list_(image_type)),
        ]
    )
    for part in range(2):
        rows = []
        for i in range(7):
            n = part * 7 + i
            loc = f"train-{part:05d}-of-00002.parquet:row {i}"
            if n in (4, 9):
                data = [b"garbage, not an image" if n == 4 else None]
                rows.append(
                    {
                        "uid": f"pq-{n}",
                        "pictures": [{"bytes": data[0], "path": None}],
                        "chat": [
                            {"role": "user", "content": f"{TAG} what?"},
                            {"role": "assistant", "content": "Nothing."},
                        ],
                    }
                )
                source.bad[loc] = "undecodable_image" if n == 4 else "missing_image"
                continue
            count = 2 if n == 6 else 1
            data = [
                image_bytes("jpg" if (n + j) % 2 else "png", (20 + n, 20 + 2 * j), 200 + n + j)
                for j in range(count)
            ]
            prompt = " ".join([TAG] * count) + f" What is row {n}?"
            answer = f"Row {n}."
            rows.append(
                {
                    "uid": f"pq-{n}",
                    "pictures": [{"bytes": d, "path": None} for d in data],
                    "chat": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
                }
            )
            _expect(source, loc, [("human", prompt), ("gpt", answer)], data)
        table = pa.Table.from_pylist(rows, schema=schema)
        pq.write_table(table, folder / f"train-{part:05d}-of-00002.parquet", row_group_size=3)
    return source
