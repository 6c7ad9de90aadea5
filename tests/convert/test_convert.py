"""``energon-plugins convert``: real inputs of each built-in format -> a prepared Energon dataset.

The inputs are written here (a LLaVA JSON array with JPEG/PNG images, ShareGPT JSON Lines, a
folder of parquet files with embedded image bytes, see ``_convert_sources``), converted with
the real converter (worker processes, Energon's prepare API), then checked three ways: the
shards hold every good record with its original image bytes and the report every bad one
with its reason; the datamodule reads train batches from the result with the ``multimodal``
and ``llava`` task encoders (labels on exactly the answers, one image-token run per image,
pixels equal to the processor on the original bytes); and the output is byte-identical
across worker counts and across an interrupted (killed) and resumed run.
"""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import yaml
from click.testing import CliRunner

import energon_plugins
from energon_plugins import ConvertError, convert_dataset
from energon_plugins.cli import cli
from energon_plugins.convert.report import read_report
from tests._convert_sources import (
    SHARD,
    SPLITS,
    llava_args,
    tree_bytes,
    write_llava_source,
    write_parquet_source,
    write_sharegpt_source,
)

IGNORE = -100
WRITERS = {
    "llava-json": write_llava_source,
    "sharegpt": write_sharegpt_source,
    "hf-parquet": write_parquet_source,
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each format's source, converted once (2 workers): ``format -> (source, result)``."""
    root = tmp_path_factory.mktemp("convert")
    out = {}
    for name, write in WRITERS.items():
        source = write(root / f"src-{name}")
        result = convert_dataset(
            source.path,
            root / f"out-{name}",
            name,
            options=source.options,
            split_ratio=SPLITS,
            shard_size=SHARD,
            workers=2,
        )
        out[name] = (source, result)
    return out


def shard_samples(output: Path) -> dict[str, dict[str, bytes]]:
    """Every sample in the output's shards: key -> {part: bytes}."""
    samples: dict[str, dict[str, bytes]] = {}
    for shard in sorted(output.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                key, _, part = member.name.partition(".")
                parts = samples.setdefault(key, {})
                assert part not in parts, f"duplicate {member.name} in {shard.name}"
                parts[part] = tar.extractfile(member).read()
    return samples


def images_of(parts: dict[str, bytes]) -> list[bytes]:
    names = sorted((p for p in parts if p != "json"), key=lambda p: int(p.split(".")[0]))
    return [parts[name] for name in names]


# ----------------------------------------------------------------------------- the output
@pytest.mark.parametrize("fmt", list(WRITERS))
def test_every_record_is_in_the_dataset_or_in_the_report(converted, fmt):
    source, result = converted[fmt]
    samples = shard_samples(result.output)
    stored = {json.loads(parts["json"])["source"]: parts for parts in samples.values()}
    report = {row["location"]: row for row in read_report(result.report)}
    assert set(stored) == set(source.good)
    assert {loc: row["reason"] for loc, row in report.items()} == source.bad
    assert result.records == len(source.good) + len(source.bad)
    assert sum(result.written.values()) == len(source.good)
    assert result.rejected_total == len(source.bad)
    for location, expected in source.good.items():
        meta = json.loads(stored[location]["json"])
        assert meta["conversations"] == expected["conversations"], location
        # the original bytes, not a re-encode; the extension follows the real format
        assert images_of(stored[location]) == expected["images"], location
        for name in stored[location]:
            if name != "json":
                assert name.split(".")[1] in ("jpg", "png")
    for row in report.values():
        assert row["message"] and isinstance(row["index"], int)


def test_splits_follow_the_ratios_and_energon_indexed_them(converted):
    source, result = converted["llava-json"]
    shares = {"train": 0.7, "val": 0.15, "test": 0.15}
    assert set(result.written) == set(shares)
    for split, count in result.written.items():  # 27 records read, 20 good
        assert abs(count - shares[split] * 20) <= 2, result.written
    meta = result.output / ".nv-meta"
    import braceexpand

    listed = yaml.safe_load((meta / "split.yaml").read_text())["split_parts"]
    for split, names in result.shards.items():
        assert [n for pattern in listed[split] for n in braceexpand.braceexpand(pattern)] == names
    assert {"dataset.yaml", "split.yaml", "index.sqlite", ".info.json"} <= {p.name for p in meta.iterdir()}
    dataset = yaml.safe_load((meta / "dataset.yaml").read_text())
    assert dataset == {
        "__module__": "megatron.energon",
        "__class__": "CrudeWebdataset",
        "subflavors": {"format": "chatml"},
    }
    info = json.loads((meta / ".info.json").read_text())
    samples = shard_samples(result.output)
    assert sum(info["shard_counts"].values()) == len(samples) == 20
    assert len(result.shards["train"]) > 1  # cut by size
    for name in result.shards["train"]:
        assert (result.output / name).stat().st_size <= 16 * 1024


# ----------------------------------------------------------------------------- training reads
def every_train_row(dm, keys):
    """(batch, row, key) for the first time each of ``keys`` shows up in the train loader."""
    seen = set()
    loader = dm.train_dataloader()
    for _ in range(20 * len(keys)):
        batch = next(loader)
        for row, key in enumerate(batch.__key__):
            if key in keys and key not in seen:
                seen.add(key)
                yield batch, row, key
        if seen == keys:
            return
    raise AssertionError(f"never read: {sorted(keys - seen)}")


def answer_runs(labels):
    """The positions of each contiguous run of labelled tokens."""
    positions = (labels != IGNORE).nonzero().flatten()
    return torch.tensor_split(positions, ((positions.diff() != 1).nonzero().flatten() + 1).tolist())


def train_keys(result):
    return {key for shard in result.shards["train"] for key in shard_samples_of(result.output / shard)}


def shard_samples_of(shard: Path) -> set[str]:
    with tarfile.open(shard) as tar:
        return {member.name.partition(".")[0] for member in tar.getmembers()}


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory):
    """A LLaVA-1.5 processor directory (tiny sizes, the real tokens and chat template)."""
    from energon_plugin_hf_processor.tiny import save_tiny_processor

    return save_tiny_processor("llava", tmp_path_factory.mktemp("tiny") / "llava")


@pytest.mark.parametrize("fmt", list(WRITERS))
@pytest.mark.parametrize("encoder", ["multimodal", "llava", "hf-processor"])
def test_train_batches_through_the_datamodule(converted, fmt, encoder, tiny_llava):
    from PIL import Image
    from transformers import AutoProcessor, CLIPImageProcessor

    from energon_plugins.synthetic import build_demo_tokenizer

    source, result = converted[fmt]
    samples = shard_samples(result.output)
    options = {"padding": "longest", "on_error": "raise"}
    if encoder == "multimodal":
        tok = build_demo_tokenizer()
        processor = CLIPImageProcessor()
        image_processor, tokens_per_image = processor, 256  # (224 / 14)^2
    elif encoder == "llava":
        tok = build_demo_tokenizer("llava")
        processor, image_processor, tokens_per_image = None, None, 576  # llava-clip, 336 px
    else:  # the model's own processor, loaded from its directory
        hf = AutoProcessor.from_pretrained(tiny_llava, local_files_only=True)
        tok, processor, image_processor = hf.tokenizer, hf.image_processor, None
        options["processor"] = str(tiny_llava)
        one = hf(text=hf.image_token, images=[Image.new("RGB", (40, 30))], return_tensors="pt")
        tokens_per_image = int((one["input_ids"] == tok.convert_tokens_to_ids("<image>")).sum())
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(result.output),
        tok,
        image_processor,
        seq_length=2048,
        micro_batch_size=2,
        num_workers=0,
        shuffle_buffer_size=4,
        task_encoder={"name": encoder, "options": options},
        batch_format=None,  # the encoder's batch: rows, keys and images as it made them
    )
    image_id = tok.convert_tokens_to_ids("<image>")
    keys = train_keys(result)
    assert keys
    for batch, row, key in every_train_row(dm, keys):
        meta = json.loads(samples[key]["json"])
        images = images_of(samples[key])
        answers = [t["value"] for t in meta["conversations"] if t["from"] == "gpt"]
        labels = batch.labels[row]
        decoded = [tok.decode(labels[run], skip_special_tokens=True).strip() for run in answer_runs(labels)]
        assert decoded == answers, key
        ids = batch.input_ids[row]
        assert int((ids == image_id).sum()) == tokens_per_image * len(images), key
        assert int(batch.num_images[row]) == len(images)
        if processor is not None and images:
            import io

            first = int(batch.num_images[:row].sum())
            pixels = batch.pixel_values[first : first + len(images)]
            direct = processor(
                images=[Image.open(io.BytesIO(b)).convert("RGB") for b in images], return_tensors="pt"
            )["pixel_values"]
            assert torch.allclose(pixels, direct, atol=1e-5), key


# ----------------------------------------------------------------------------- determinism, resume
def test_same_input_gives_byte_identical_shards_whatever_the_workers(converted, tmp_path):
    source, first = converted["llava-json"]
    again = convert_dataset(
        source.path,
        tmp_path / "again",
        "llava-json",
        options=source.options,
        split_ratio=SPLITS,
        shard_size=SHARD,
        workers=0,
    )
    assert tree_bytes(again.output) == tree_bytes(first.output)


_KILLER = """
import os, signal, sys, tarfile
from energon_plugins import convert_dataset

calls = 0
addfile = tarfile.TarFile.addfile

def dying_addfile(self, info, fileobj=None):  # the power goes out in the middle of a sample
    global calls
    calls += 1
    if calls == 31:
        self.fileobj.flush()  # what was written of this shard since the checkpoint reached the disk
        os.kill(os.getpid(), signal.SIGKILL)
    return addfile(self, info, fileobj)

tarfile.TarFile.addfile = dying_addfile
convert_dataset(sys.argv[1], sys.argv[2], "llava-json", options={{"image_folder": sys.argv[3]}},
                split_ratio="{splits}", shard_size="{shard}", workers=0, checkpoint_every=5)
"""


def test_a_killed_run_resumes_without_duplicates(converted, tmp_path):
    source, uninterrupted = converted["llava-json"]
    out = tmp_path / "killed"
    script = tmp_path / "killer.py"
    script.write_text(_KILLER.format(splits=SPLITS, shard=SHARD))
    proc = subprocess.run(
        [sys.executable, str(script), str(source.path), str(out), source.options["image_folder"]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    state = json.loads((out / "convert.json").read_text())
    checkpoint = state["checkpoint"]["next_index"]
    assert state["status"] == "running" and checkpoint == 20  # the last multiple of 5 reached
    # samples written after the checkpoint (the last one cut short) are on disk: resume cuts them
    opened = [s["open"] for s in state["checkpoint"]["streams"].values() if s["open"]]
    assert any((out / o["name"]).stat().st_size > o["offset"] for o in opened)
    assert not (out / ".nv-meta" / "split.yaml").exists()

    runner = CliRunner()
    args = llava_args(source, out, "--max-rejected", "30%", "--json", workers=2)
    refused = runner.invoke(cli, args[:-1])
    assert refused.exit_code == 1 and "--resume" in refused.output
    resumed = runner.invoke(cli, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.output)["resumed_from"] == checkpoint
    assert tree_bytes(out) == tree_bytes(uninterrupted.output)
    assert len(shard_samples(out)) == 20  # (shard_samples fails on a duplicate part)
    # a finished conversion resumed again is left as it is
    again = runner.invoke(cli, [*args, "--resume"])
    assert again.exit_code == 0 and json.loads(again.output)["records"] == 27


def test_resume_with_other_settings_is_refused(converted, tmp_path):
    source, _ = converted["sharegpt"]
    out = tmp_path / "o"
    convert_dataset(source.path, out, "sharegpt", shard_size=SHARD)
    with pytest.raises(ConvertError, match="shard_size"):
        convert_dataset(source.path, out, "sharegpt", shard_size="32KiB", resume=True)
    with pytest.raises(ConvertError, match="--resume to continue it or --overwrite"):
        convert_dataset(source.path, out, "sharegpt", shard_size=SHARD)
    result = convert_dataset(source.path, out, "sharegpt", shard_size="32KiB", overwrite=True)
    assert result.records == 15


# ----------------------------------------------------------------------------- strict, errors
def test_strict_stops_at_the_first_bad_record(converted, tmp_path):
    source, _ = converted["llava-json"]
    with pytest.raises(ConvertError, match=r"data.json:#3: missing_image: .*nope.jpg"):
        convert_dataset(
            source.path, tmp_path / "a", "llava-json", options=source.options, strict=True, workers=2
        )
    result = CliRunner().invoke(
        cli,
        [
            "convert",
            str(source.path),
            str(tmp_path / "b"),
            "--from",
            "llava-json",
            "--strict",
            "-o",
            f"image_folder={source.options['image_folder']}",
        ],
    )
    assert result.exit_code == 1
    assert "Error: data.json:#3: missing_image" in result.output
    assert "Traceback" not in result.output


def test_user_errors_name_what_is_wrong(converted, tmp_path):
    source, _ = converted["llava-json"]
    runner = CliRunner()

    def run(*args):
        return runner.invoke(cli, ["convert", str(source.path), str(tmp_path / "x"), *args])

    unknown = run("--from", "llava-jsn")
    assert unknown.exit_code == 1 and "did you mean 'llava-json'" in unknown.output
    option = run("--from", "llava-json", "-o", "image_dir=x")
    assert option.exit_code == 1 and "image_dir" in option.output and "image_folder" in option.output
    ratio = run("--from", "llava-json", "--split-ratio", "val=1")
    assert ratio.exit_code == 1 and "train split" in ratio.output
    size = run("--from", "llava-json", "--shard-size", "lots")
    assert size.exit_code == 1 and "shard_size" in size.output
    (tmp_path / "notjson.json").write_text('{\n  "a": 1\n}\n')
    broken = runner.invoke(
        cli, ["convert", str(tmp_path / "notjson.json"), str(tmp_path / "y"), "--from", "sharegpt"]
    )
    assert broken.exit_code == 1 and "notjson.json" in broken.output


def test_a_json_array_is_streamed(tmp_path):
    """Records before a break in a JSON array arrive before the error: nothing loads it whole."""
    from energon_plugins.convert.formats.json_stream import decode_payload, iter_json_records

    path = tmp_path / "big.json"
    path.write_text("[" + ",".join(json.dumps({"n": i}) for i in range(1000)) + ", {broken")
    seen = []
    with pytest.raises(ConvertError, match=r"big.json: invalid JSON after record #999"):
        for location, payload in iter_json_records(path, "big.json"):
            seen.append(decode_payload(payload)["n"])
    assert seen == list(range(1000))


# ----------------------------------------------------------------------------- the CLI on the result
def test_cli_convert_then_preview_and_validate(converted, tmp_path):
    from energon_plugins.synthetic import save_demo_tokenizer

    source, _ = converted["llava-json"]
    runner = CliRunner()
    out = tmp_path / "ds"
    result = runner.invoke(
        cli,
        [
            "convert",
            str(source.path),
            str(out),
            "--from",
            "llava-json",
            "-o",
            f"image_folder={source.options['image_folder']}",
            "--split-ratio",
            SPLITS,
            "--workers",
            "0",
            "--max-rejected",
            "30%",
        ],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 0, result.output
    assert "20 written, 7 rejected" in result.output and "rejected.jsonl" in result.output
    config = tmp_path / "train.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "path": str(out),
                "tokenizer": {"path": str(save_demo_tokenizer(tmp_path / "tok"))},
                "seq_length": 1024,
                "num_workers": 0,
            }
        )
    )
    validate_args = ["validate", str(config)]
    from energon_plugins.cli.validate_cmd import validate_command

    if any("--deep" in getattr(p, "opts", ()) for p in validate_command.params):
        validate_args.append("--deep")
    valid = runner.invoke(cli, validate_args)
    assert valid.exit_code == 0, valid.output
    preview = runner.invoke(cli, ["preview", str(config), "-n", "2"])
    assert preview.exit_code == 0, preview.output
    assert "Shape number" in preview.output and "<image x256>" in preview.output


def test_split_assignment_is_even_and_positional():
    from energon_plugins.convert.splits import SplitAssigner, parse_split_ratio

    ratios = parse_split_ratio("0.8,0.1,0.1")
    assert ratios == [("train", 0.8), ("val", 0.1), ("test", 0.1)]
    assert parse_split_ratio("train=0.75,val=0.25,test=0") == [("train", 0.75), ("val", 0.25)]
    with pytest.raises(ConvertError, match="sum to 4"):  # weights are no longer rescaled
        parse_split_ratio("train=3,val=1")
    assign = SplitAssigner(ratios)
    for n in (10, 100, 10_000):
        counts = {name: 0 for name, _ in ratios}
        for i in range(n):
            counts[assign(i)] += 1
        for name, ratio in ratios:
            assert abs(counts[name] - ratio * n) <= 2, (n, counts)


def test_images_keep_their_bytes_unless_asked():
    import io

    from PIL import Image

    from energon_plugins.convert.checks import EXTENSION_OF_FORMAT, check_image
    from energon_plugins.convert.records import RecordError
    from energon_plugins.encoding.chat.chatml import IMAGE_EXTENSIONS

    assert set(EXTENSION_OF_FORMAT.values()) <= set(IMAGE_EXTENSIONS)  # the cooker finds them all

    def encoded(fmt):
        buffer = io.BytesIO()
        Image.new("RGB", (40, 24), (10, 200, 30)).save(buffer, format=fmt)
        return buffer.getvalue()

    jpeg, webp, tga = encoded("JPEG"), encoded("WEBP"), encoded("TGA")
    assert check_image(jpeg, 0, None) == ("jpg", jpeg)
    assert check_image(webp, 0, None) == ("webp", webp)
    # a format the encoders' decoder is not given by extension: stored as PNG, same pixels
    extension, data = check_image(tga, 0, None)
    assert (
        extension == "png" and Image.open(io.BytesIO(data)).tobytes() == Image.open(io.BytesIO(tga)).tobytes()
    )
    extension, data = check_image(webp, 0, "jpeg")
    assert extension == "jpg" and Image.open(io.BytesIO(data)).format == "JPEG"
    with pytest.raises(RecordError) as bad:
        check_image(jpeg[: len(jpeg) // 2], 3, None)  # a truncated JPEG
    assert bad.value.reason == "undecodable_image" and "image 3" in bad.value.message


def test_parquet_question_answer_layout(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests._convert_sources import image_bytes

    folder = tmp_path / "vqa"
    folder.mkdir()
    rows = [
        {
            "q": f"What is {i}?",
            "a": f"It is {i}.",
            "image": {"bytes": image_bytes("jpg", (20, 20), i), "path": None},
        }
        for i in range(6)
    ]
    pq.write_table(pa.Table.from_pylist(rows), folder / "part-0.parquet")
    result = convert_dataset(
        folder,
        tmp_path / "out",
        "hf-parquet",
        workers=0,
        split_ratio="train=1",
        options={"question_column": "q", "answer_column": "a", "images_column": "image"},
    )
    assert result.written == {"train": 6} and result.rejected == {}
    first = json.loads(shard_samples(result.output)["0000000000"]["json"])
    assert first["conversations"] == [
        {"from": "human", "value": "<image>\nWhat is 0?"},
        {"from": "gpt", "value": "It is 0."},
    ]
