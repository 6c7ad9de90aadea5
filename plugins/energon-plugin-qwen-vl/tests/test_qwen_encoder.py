"""The ``qwen2-vl`` task encoder and image processor, on real Energon datasets.

Datasets are written by ``energon_plugins.synthetic.write_dataset`` (kind ``chatml``: one to
three images of mixed sizes per sample; ``vqa``) or by
``energon_plugins.testing.write_crude_dataset`` (hand-made samples whose image tags
disagree with their images), prepared with Energon's prepare API and read through the real
datamodule and Energon loaders. The tokenizer is the offline demo family ``qwen2`` (ChatML,
``<|vision_start|>``, ``<|image_pad|>``, ``<|vision_end|>``).
"""

import os
import subprocess
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from PIL import Image

import energon_plugins
from energon_plugins import BuildContext, ConfigError, PluginOptionsError
from energon_plugins.testing import build_demo_tokenizer, read_images, write_crude_dataset, write_dataset

IGNORE = -100
SYSTEM = "You are a helpful assistant."
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
# Small pixel budgets keep the test fast and make both bounds bite on these sizes.
MIN_PIXELS = 28 * 28 * 4
MAX_PIXELS = 28 * 28 * 24
SIZES = ((12, 10), (220, 160))


def real_batches(dm):
    """One validation pass without the zero-loss fillers that even out the ranks."""
    from energon_plugins.testing import is_padding_batch

    return [batch for batch in dm.val_dataloader().one_pass() if not is_padding_batch(batch)]


@pytest.fixture(scope="module")
def tok():
    return build_demo_tokenizer("qwen2")


@pytest.fixture(scope="module")
def ids(tok):
    return {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_end|>")
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen-data")
    return {
        "chatml": write_dataset(
            root / "chatml", kind="chatml", num_samples=24, samples_per_shard=4, image_size=SIZES, seed=11
        ),
        "vqa": write_dataset(
            root / "vqa", kind="vqa", num_samples=8, samples_per_shard=4, image_size=SIZES, seed=12
        ),
        "root": root,
    }


def reference_processor():
    """transformers' Qwen2-VL processor with the same pixel budget, built here directly."""
    import transformers

    return transformers.Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def processor():
    return energon_plugins.create(
        "image_processor", "qwen2-vl", {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}
    )


def datamodule(info_path, tok, *, batch=2, seq_length=4096, image_processor="default", **options):
    options = {"padding": "longest", **options}
    return energon_plugins.EnergonMultiModalDataModule(
        str(info_path),
        tok,
        processor() if image_processor == "default" else image_processor,
        seq_length=seq_length,
        micro_batch_size=batch,
        num_workers=0,
        shuffle_buffer_size=8,
        task_encoder={"name": "qwen2-vl", "options": options},
        batch_format=None,  # the task encoder's own batch
    )


def rows_of_every_train_sample(dm, info):
    """Iterate the training loader until every train key was seen; yield (batch, row, key)."""
    wanted = set(info.split_keys["train"]) & info.good_keys
    seen = set()
    loader = dm.train_dataloader()
    for _ in range(10 * len(wanted)):
        batch = next(loader)
        for row, key in enumerate(batch.__key__):
            if key not in seen:
                seen.add(key)
                yield batch, row, key
        if seen >= wanted:
            return
    raise AssertionError(f"keys never seen: {sorted(wanted - seen)}")


def label_runs(labels):
    runs, start = [], None
    for i, lab in enumerate(labels.tolist() + [IGNORE]):
        if lab != IGNORE and start is None:
            start = i
        elif lab == IGNORE and start is not None:
            runs.append((start, i))
            start = None
    return runs


def image_runs(seq, pad_id):
    runs, start = [], None
    for i, t in enumerate(seq + [-1]):
        if t == pad_id and start is None:
            start = i
        elif t != pad_id and start is not None:
            runs.append((start, i))
            start = None
    return runs


def collapsed_text(tok, seq, pad_id):
    out = [t for i, t in enumerate(seq) if not (t == pad_id and i and seq[i - 1] == pad_id)]
    return tok.decode(out)


def row_images(batch, row):
    """This row's slice of the batch's pixel rows and grids."""
    first = int(batch.num_images[:row].sum())
    count = int(batch.num_images[row])
    patches = batch.image_grid_thw.prod(dim=-1)
    start = int(patches[:first].sum())
    stop = start + int(patches[first : first + count].sum())
    return batch.pixel_values[start:stop], batch.image_grid_thw[first : first + count]


def check_row(batch, row, tok, ids, images, turns, ref):
    """Grid, pixels, image tokens, labels and decoded text of one row."""
    pad = ids["<|image_pad|>"]
    real = int(batch.attention_mask[row].sum())
    seq = batch.input_ids[row, :real].tolist()
    labels = batch.labels[row, :real]
    pixels, grid = row_images(batch, row)
    direct = ref(images=images, return_tensors="pt")
    assert torch.equal(grid, direct["image_grid_thw"])
    assert pixels.shape == direct["pixel_values"].shape
    assert torch.allclose(pixels, direct["pixel_values"], atol=1e-5)
    # one <|vision_start|> run <|vision_end|> per image, t*h*w/merge^2 long
    runs = image_runs(seq, pad)
    expected = [int(t * h * w) // 4 for t, h, w in direct["image_grid_thw"].tolist()]
    assert [b - a for a, b in runs] == expected
    for a, b in runs:
        assert seq[a - 1] == ids["<|vision_start|>"] and seq[b] == ids["<|vision_end|>"]
        assert (labels[a:b] == IGNORE).all()
    # labels: each assistant answer and its <|im_end|>, nothing else
    answers = [text for role, text in turns if role == "assistant"]
    lruns = label_runs(labels)
    assert len(lruns) == len(answers)
    for (a, b), answer in zip(lruns, answers):
        assert tok.decode(labels[a:b], skip_special_tokens=True) == answer
        assert int(labels[b - 1]) == ids["<|im_end|>"]
    # decoded input ids reproduce the ChatML conversation
    text = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    for role, content in turns:
        text += f"<|im_start|>{role}\n{content.replace('<image>', VISION)}<|im_end|>\n"
    assert collapsed_text(tok, seq, pad) == text
    return expected


# --------------------------------------------------------------------------- registration


def test_discovered_through_entry_points():
    rows = {(r.name, r.kind, r.distribution, r.status) for r in energon_plugins.available()}
    assert ("qwen2-vl", "task_encoder", "energon-plugin-qwen-vl", "ok") in rows
    assert ("qwen2-vl", "image_processor", "energon-plugin-qwen-vl", "ok") in rows


def test_listing_imports_nothing_heavy():
    code = (
        "import sys, energon_plugins; "
        "names = [r.name for r in energon_plugins.available('image_processor')]; "
        "assert 'qwen2-vl' in names, names; "
        "heavy = [m for m in ('torch', 'transformers', 'megatron.energon') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_options_are_refused_with_the_field_named():
    with pytest.raises(PluginOptionsError, match="min_pixels"):
        energon_plugins.create("image_processor", "qwen2-vl", {"min_pixels": 10_000, "max_pixels": 5_000})
    with pytest.raises(PluginOptionsError, match="image_tokens"):
        energon_plugins.create("task_encoder", "qwen2-vl", {"image_tokens": 4})


def test_a_processor_without_grids_is_refused(tok):
    clip = energon_plugins.create("image_processor", "hf", {"class_name": "CLIPImageProcessorPil"})
    with pytest.raises(ConfigError, match="merge_size"):
        energon_plugins.create(
            "task_encoder", "qwen2-vl", None, BuildContext(tokenizer=tok, image_processor=clip)
        )


def test_min_max_pixels_bound_the_grid():
    proc = processor()
    big = Image.new("RGB", (1000, 700), (1, 2, 3))
    small = Image.new("RGB", (8, 8), (1, 2, 3))
    grid = proc(images=[big, small], return_tensors="pt")["image_grid_thw"]
    pixels = (grid[:, 1] * grid[:, 2] * 14 * 14).tolist()
    assert pixels[0] <= MAX_PIXELS and pixels[1] >= MIN_PIXELS
    assert (grid[:, 1] % 2 == 0).all() and (grid[:, 2] % 2 == 0).all()


# --------------------------------------------------------------------------- real data


def test_chatml_conversations_with_several_images(data, tok, ids):
    info = data["chatml"]
    dm = datamodule(info.path, tok, on_error="raise")
    ref = reference_processor()
    counts, images_per_sample = set(), set()
    for batch, row, key in rows_of_every_train_sample(dm, info):
        record = info.samples[key]
        turns = [
            ("user" if t["from"] == "human" else "assistant", t["value"]) for t in record["conversations"]
        ]
        images = read_images(info.shards, key)
        assert [list(i.size) for i in images] == record["image_sizes"]
        counts.update(check_row(batch, row, tok, ids, images, turns, ref))
        images_per_sample.add(len(images))
    assert max(images_per_sample) > 1, "the data should hold samples with several images"
    assert len(counts) > 2, f"mixed sizes should give several token counts, got {counts}"


def test_vqa_samples(data, tok, ids):
    info = data["vqa"]
    dm = datamodule(info.path, tok, on_error="raise")
    ref = reference_processor()
    for batch, row, key in rows_of_every_train_sample(dm, info):
        record = info.samples[key]
        turns = [("user", "<image>\n" + record["context"]), ("assistant", record["answers"][0])]
        check_row(batch, row, tok, ids, read_images(info.shards, key), turns, ref)


def test_default_processor_when_the_context_has_none(tok):
    enc = energon_plugins.create("task_encoder", "qwen2-vl", None, BuildContext(tokenizer=tok))
    assert enc.merge_size == 2
    assert enc.image_processor.size.longest_edge == 28 * 28 * 1280


# --------------------------------------------------------------------------- bad samples


@pytest.fixture(scope="module")
def mismatched(data):
    """Good two-image samples plus samples with one tag for two images, or three tags."""
    a = Image.new("RGB", (40, 24), (30, 200, 30))
    b = Image.new("RGB", (24, 60), (200, 30, 30))
    good = [
        {"from": "human", "value": "<image>\n<image>\nWhich is red?"},
        {"from": "gpt", "value": "The second."},
    ]
    fewer = [{"from": "human", "value": "<image>\nWhich is red?"}, {"from": "gpt", "value": "The second."}]
    more = [
        {"from": "human", "value": "<image>\n<image>\nWhich is red?"},
        {"from": "gpt", "value": "The second."},
        {"from": "human", "value": "And this one? <image>"},
        {"from": "gpt", "value": "Green."},
    ]
    samples, bad = [], set()
    for i in range(16):
        conv = (good, fewer, good, more)[i % 4]
        key = f"qm-{i:03d}"
        if conv is not good:
            bad.add(key)
        samples.append((key, [a, b], conv))
    write_crude_dataset(data["root"] / "mismatch", samples, fmt="chatml")
    return data["root"] / "mismatch", bad


def test_tag_mismatch_raises_a_clear_error(mismatched, tok):
    path, bad = mismatched
    dm = datamodule(path, tok, batch=1, on_error="raise")
    with pytest.raises(Exception) as err:
        for _ in dm.val_dataloader().one_pass():
            pass
    text = str(err.value)
    assert "ImageTagMismatchError" in text and "2 image(s)" in text
    assert any(key in text for key in bad)


def test_tag_mismatch_is_skipped_and_counted(mismatched, tok):
    path, bad = mismatched
    dm = datamodule(path, tok, batch=1, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = [k for batch in real_batches(dm) for k in batch.__key__]
    val_bad = {f"qm-{i:03d}" for i in range(8, 16)} & bad  # shards 2-3 are the val split
    assert keys and not (set(keys) & bad)
    assert len(keys) == 8 - len(val_bad)
    assert dm.validation_task_encoder.error_counts() == {"ImageTagMismatchError": len(val_bad)}


def test_missing_conversations_fail_in_the_cooker_under_the_policy(data, tok):
    info = write_dataset(
        data["root"] / "missing",
        kind="chatml",
        num_samples=16,
        samples_per_shard=4,
        split_ratio=(("train", 0.5), ("val", 0.5)),
        corrupt={"missing_field": 4},
        image_size=(32, 32),
        seed=9,
    )
    missing = set(info.corrupt_keys["missing_field"]) & set(info.split_keys["val"])
    assert missing, "the seed should put a corrupt sample into the val split"
    dm = datamodule(info.path, tok, batch=1, on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = {k for batch in real_batches(dm) for k in batch.__key__}
    assert keys == set(info.split_keys["val"]) - missing
    assert dm.validation_task_encoder.error_counts() == {"MissingFieldError": len(missing)}
    with pytest.raises(Exception, match="conversations"):
        strict = datamodule(info.path, tok, batch=1, on_error="raise")
        for _ in strict.val_dataloader().one_pass():
            pass


# --------------------------------------------------------------------------- truncation


def test_truncation_keeps_whole_images_and_no_open_vision_start(tok, ids):
    from energon_plugins import ChatMLSample

    to_tensor = lambda img: torch.from_numpy(__import__("numpy").array(img)).permute(2, 0, 1) / 255.0
    images = [
        to_tensor(Image.new("RGB", (60, 40), (200, 0, 0))),
        to_tensor(Image.new("RGB", (90, 90), (0, 0, 200))),
    ]
    sample = ChatMLSample(
        __key__="t-1",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        conversation=[
            {"role": "user", "content": "<image>\nColor?"},
            {"role": "assistant", "content": "Red."},
            {"role": "user", "content": "<image>\nAnd this one?"},
            {"role": "assistant", "content": "Blue."},
        ],
        images=images,
    )

    def encode(seq_length):
        ctx = BuildContext(tokenizer=tok, image_processor=processor(), seq_length=seq_length)
        return energon_plugins.create("task_encoder", "qwen2-vl", None, ctx).encode_sample(sample)

    full = encode(4096)
    seq = full.input_ids.tolist()
    second = [i for i, t in enumerate(seq) if t == ids["<|vision_start|>"]][1]
    cut = encode(second + 3)  # the cut would fall inside the second image
    assert cut.truncated and cut.num_images == 1
    assert cut.input_ids.tolist() == seq[:second]  # no dangling <|vision_start|>
    assert torch.equal(cut.image_grid_thw, full.image_grid_thw[:1])
    assert torch.equal(cut.pixel_values, full.pixel_values[: int(full.image_grid_thw[0].prod())])
