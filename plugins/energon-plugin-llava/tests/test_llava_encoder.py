"""The ``llava`` task encoder and ``llava-clip`` processor, on real Energon datasets.

Datasets are written by ``energon_plugins.synthetic.write_dataset`` (kinds ``llava``, ``vqa``,
``captioning``) or by ``energon_plugins.testing.write_crude_dataset`` (hand-made samples
whose image tags disagree with their images), prepared with Energon's prepare API and read
through the real datamodule and Energon loaders. Tokenizers are the offline demo family
``llava`` (Vicuna v1 template, ``<image>`` special token).
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
from energon_plugins import BuildContext, PluginOptionsError
from energon_plugins.testing import build_demo_tokenizer, read_images, write_crude_dataset, write_dataset

IGNORE = -100
SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
# Mixed sizes, landscape and portrait, so the square padding matters.
SIZES = ((20, 16), (72, 60))


def real_batches(dm):
    """One validation pass without the zero-loss fillers that even out the ranks."""
    from energon_plugins.testing import is_padding_batch

    return [batch for batch in dm.val_dataloader().one_pass() if not is_padding_batch(batch)]


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tok():
    return build_demo_tokenizer("llava")


@pytest.fixture(scope="module")
def image_id(tok):
    return tok.convert_tokens_to_ids("<image>")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("llava-data")
    return {
        "llava": write_dataset(
            root / "llava", kind="llava", num_samples=24, samples_per_shard=4, image_size=SIZES, seed=3
        ),
        "vqa": write_dataset(
            root / "vqa", kind="vqa", num_samples=12, samples_per_shard=4, image_size=SIZES, seed=4
        ),
        "captioning": write_dataset(
            root / "cap", kind="captioning", num_samples=12, samples_per_shard=4, image_size=SIZES, seed=5
        ),
        "root": root,
    }


def clip_reference(size=336):
    """transformers' CLIP processor with LLaVA-1.5's settings, built here independently."""
    import transformers

    return transformers.CLIPImageProcessor(
        size={"shortest_edge": size}, crop_size={"height": size, "width": size}
    )


def expand2square(img, proc):
    """LLaVA-1.5's padding: the image centred on a square of the processor's mean colour."""
    w, h = img.size
    side = max(w, h)
    color = tuple(int(round(m * 255)) for m in proc.image_mean)
    out = Image.new("RGB", (side, side), color)
    out.paste(img, ((side - w) // 2, (side - h) // 2))
    return out


def datamodule(info, tok, *, image_processor=None, seq_length=1024, batch=2, **options):
    options = {"padding": "longest", **options}
    return energon_plugins.EnergonMultiModalDataModule(
        str(info.path),
        tok,
        image_processor,
        seq_length=seq_length,
        micro_batch_size=batch,
        num_workers=0,
        shuffle_buffer_size=8,
        task_encoder={"name": "llava", "options": options},
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
    """Contiguous runs of positions whose label is not the ignore index."""
    runs, start = [], None
    for i, lab in enumerate(labels.tolist() + [IGNORE]):
        if lab != IGNORE and start is None:
            start = i
        elif lab == IGNORE and start is not None:
            runs.append((start, i))
            start = None
    return runs


def collapsed_text(tok, ids, image_id):
    """Decode ids with every run of image tokens collapsed back to one ``<image>`` tag."""
    out, prev = [], None
    for t in ids:
        if t == image_id and prev == image_id:
            continue
        out.append(t)
        prev = t
    return tok.decode(out)


def check_row(batch, row, tok, image_id, images, turns, proc_ref):
    """The shared per-sample checks: image tokens, pixels, labels, decoded text."""
    real = int(batch.attention_mask[row].sum())
    ids, labels = batch.input_ids[row, :real], batch.labels[row, :real]
    # pixel values equal the reference processor on the padded original image
    direct = proc_ref(images=[expand2square(img, proc_ref) for img in images], return_tensors="pt")[
        "pixel_values"
    ]
    start = int(batch.num_images[:row].sum())
    mine = batch.pixel_values[start : start + len(images)]
    assert mine.shape == direct.shape
    assert torch.allclose(mine, direct, atol=1e-5)
    # one run of image tokens per image, as long as the processor output implies
    height, width = direct.shape[-2:]
    per_image = (height // 14) * (width // 14)
    where = (ids == image_id).nonzero().flatten()
    assert len(where) == per_image * len(images)
    assert int(where[-1] - where[0]) + 1 == len(where)  # contiguous: one image
    assert (labels[where] == IGNORE).all()
    # labels: exactly the assistant answers, each closed by </s>
    answers = [text for kind, text in turns if kind == "assistant"]
    runs = label_runs(labels)
    assert len(runs) == len(answers)
    for (a, b), answer in zip(runs, answers):
        assert torch.equal(labels[a:b], ids[a:b])
        assert tok.decode(labels[a:b], skip_special_tokens=True).strip() == answer
        assert int(labels[b - 1]) == tok.eos_token_id
    # decoding reproduces the LLaVA-1.5 conversation text
    expected = "<s>" + SYSTEM + " "
    for kind, text in turns:
        expected += f"USER: {text} " if kind == "user" else f"ASSISTANT: {text}</s>"
    assert collapsed_text(tok, ids.tolist(), image_id) == expected
    return per_image


# --------------------------------------------------------------------------- registration


def test_discovered_through_entry_points():
    rows = {(r.name, r.kind, r.distribution, r.status) for r in energon_plugins.available()}
    assert ("llava", "task_encoder", "energon-plugin-llava", "ok") in rows
    assert ("llava-clip", "image_processor", "energon-plugin-llava", "ok") in rows
    assert isinstance(energon_plugins.resolve("task_encoder", "llava").factory, str)


def test_listing_imports_nothing_heavy():
    code = (
        "import sys, energon_plugins; "
        "names = [r.name for r in energon_plugins.available('task_encoder')]; "
        "assert 'llava' in names, names; "
        "heavy = [m for m in ('torch', 'transformers', 'megatron.energon') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_options_are_refused_with_the_field_named():
    with pytest.raises(PluginOptionsError, match="image_position"):
        energon_plugins.create("task_encoder", "llava", {"image_position": "middle"})
    with pytest.raises(PluginOptionsError, match="image_aspect_ratio"):
        energon_plugins.create("image_processor", "llava-clip", {"image_aspect_ratio": "stretch"})


# --------------------------------------------------------------------------- image tokens


@pytest.mark.parametrize(
    ("image_size", "patch_size", "expected"),
    [(336, 14, 576), (224, 14, 256), (336, 16, 441), (448, 14, 1024)],
)
def test_image_tokens_follow_the_processor_settings(tok, image_size, patch_size, expected):
    proc = energon_plugins.create("image_processor", "llava-clip", {"image_size": image_size})
    ctx = BuildContext(tokenizer=tok, image_processor=proc, seq_length=4096)
    enc = energon_plugins.create("task_encoder", "llava", {"patch_size": patch_size}, ctx)
    assert enc.tokens_per_image == (image_size // patch_size) ** 2 == expected
    out = proc(images=[Image.new("RGB", (50, 30), (200, 10, 10))], return_tensors="pt")
    assert tuple(out["pixel_values"].shape[-2:]) == (image_size, image_size)


def test_default_processor_is_llava_clip_336(tok):
    enc = energon_plugins.create("task_encoder", "llava", None, BuildContext(tokenizer=tok))
    assert enc.tokens_per_image == 576
    assert enc.image_processor.crop_size.height == 336 and enc.image_processor.pad


# --------------------------------------------------------------------------- real data


def test_multi_turn_conversations(data, tok, image_id):
    info = data["llava"]
    dm = datamodule(info, tok, on_error="raise")
    ref = clip_reference()
    checked = 0
    turns_seen = set()
    for batch, row, key in rows_of_every_train_sample(dm, info):
        record = info.samples[key]
        turns = [
            ("user" if t["from"] == "human" else "assistant", t["value"]) for t in record["conversations"]
        ]
        turns_seen.add(len(turns) // 2)
        images = read_images(info.shards, key)
        assert [list(img.size) for img in images] == record["image_sizes"]
        assert check_row(batch, row, tok, image_id, images, turns, ref) == 576
        checked += 1
    assert checked == len(info.split_keys["train"])
    assert max(turns_seen) > 1, "the data should hold multi-turn conversations"


def test_vqa_and_captioning(data, tok, image_id):
    ref = clip_reference()
    for kind in ("vqa", "captioning"):
        info = data[kind]
        dm = datamodule(info, tok, on_error="raise")
        for batch, row, key in rows_of_every_train_sample(dm, info):
            record = info.samples[key]
            if kind == "vqa":
                turns = [("user", "<image>\n" + record["context"]), ("assistant", record["answers"][0])]
            else:
                turns = [
                    ("user", "<image>\nProvide a brief description of the given image."),
                    ("assistant", record["caption"]),
                ]
            check_row(batch, row, tok, image_id, read_images(info.shards, key), turns, ref)


def test_crop_mode_and_a_context_processor(data, tok, image_id):
    """Whatever processor the context gives is used (here CLIP 224 without padding)."""
    info = data["vqa"]
    proc = energon_plugins.create(
        "image_processor", "llava-clip", {"image_size": 224, "image_aspect_ratio": "crop"}
    )
    dm = datamodule(info, tok, image_processor=proc)
    batch = next(dm.train_dataloader())
    ref = clip_reference(224)
    for row, key in enumerate(batch.__key__):
        direct = ref(images=read_images(info.shards, key), return_tensors="pt")["pixel_values"]
        assert torch.allclose(batch.pixel_values[row : row + 1], direct, atol=1e-5)
        assert int((batch.input_ids[row] == image_id).sum()) == 256


# --------------------------------------------------------------------------- bad samples


@pytest.fixture(scope="module")
def mismatched(data):
    """Good samples plus samples with two tags for one image, or no tag at all."""
    img = Image.new("RGB", (40, 24), (30, 200, 30))
    good = [{"from": "human", "value": "<image>\nWhat color is it?"}, {"from": "gpt", "value": "Green."}]
    two = [{"from": "human", "value": "<image>\n<image>\nWhat color?"}, {"from": "gpt", "value": "Green."}]
    none = [{"from": "human", "value": "What color?"}, {"from": "gpt", "value": "Green."}]
    samples, bad = [], set()
    for i in range(16):
        conv = (good, two, good, none)[i % 4]
        key = f"mm-{i:03d}"
        if conv is not good:
            bad.add(key)
        samples.append((key, [img], conv))
    shards = write_crude_dataset(data["root"] / "mismatch", samples, fmt="llava", image_names="single")
    return data["root"] / "mismatch", bad, shards


def test_tag_mismatch_raises_a_clear_error(mismatched, tok):
    path, bad, _ = mismatched
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=1024,
        micro_batch_size=1,
        num_workers=0,
        task_encoder={"name": "llava", "options": {"on_error": "raise"}},
        batch_format=None,  # the task encoder's own batch
    )
    with pytest.raises(Exception) as err:
        for _ in dm.val_dataloader().one_pass():
            pass
    text = str(err.value)
    assert "ImageTagMismatchError" in text and "image(s)" in text
    assert any(key in text for key in bad)


def test_tag_mismatch_is_skipped_and_counted(mismatched, tok):
    path, bad, shards = mismatched
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(path),
        tok,
        None,
        seq_length=1024,
        micro_batch_size=1,
        num_workers=0,
        task_encoder={"name": "llava", "options": {"on_error": "skip"}},
        batch_format=None,  # the task encoder's own batch
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = [k for batch in real_batches(dm) for k in batch.__key__]
    val_bad = {f"mm-{i:03d}" for i in range(8, 16)} & bad  # shards 2-3 are the val split
    assert keys and not (set(keys) & bad)
    assert len(keys) == 8 - len(val_bad)
    assert dm.validation_task_encoder.error_counts() == {"ImageTagMismatchError": len(val_bad)}


def test_missing_conversations_fail_in_the_cooker_under_the_policy(data, tok):
    info = write_dataset(
        data["root"] / "missing",
        kind="llava",
        num_samples=16,
        samples_per_shard=4,
        split_ratio=(("train", 0.5), ("val", 0.5)),
        corrupt={"missing_field": 4},
        seed=9,
    )
    missing = set(info.corrupt_keys["missing_field"]) & set(info.split_keys["val"])
    assert missing, "the seed should put a corrupt sample into the val split"

    def loader(policy):
        return energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            None,
            seq_length=1024,
            micro_batch_size=1,
            num_workers=0,
            task_encoder={"name": "llava", "options": {"on_error": policy}},
            batch_format=None,  # the task encoder's own batch
        )

    dm = loader("skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = {k for batch in real_batches(dm) for k in batch.__key__}
    assert keys == set(info.split_keys["val"]) - missing
    assert dm.validation_task_encoder.error_counts() == {"MissingFieldError": len(missing)}
    with pytest.raises(Exception, match="conversations"):
        for _ in loader("raise").val_dataloader().one_pass():
            pass


def test_tokenizer_chat_template_option(data, tok):
    """``chat_template: tokenizer`` renders with the tokenizer's template (here Vicuna v1 too)."""
    info = data["llava"]
    rows = {}
    for template in ("llava-1.5", "tokenizer"):
        dm = datamodule(info, tok, chat_template=template)
        batch = next(dm.train_dataloader())
        rows[template] = (batch.__key__, batch.input_ids, batch.labels)
    assert rows["llava-1.5"][0] == rows["tokenizer"][0]
    assert torch.equal(rows["llava-1.5"][1], rows["tokenizer"][1])
    assert torch.equal(rows["llava-1.5"][2], rows["tokenizer"][2])
    # a system prompt of our own shows up in the text, and none leaves it out
    dm = datamodule(info, tok, system_prompt="Be brief.")
    assert tok.decode(next(dm.train_dataloader()).input_ids[0]).startswith("<s>Be brief. USER: ")
    dm = datamodule(info, tok, system_prompt=None)
    assert tok.decode(next(dm.train_dataloader()).input_ids[0]).startswith("<s>USER: <image>")


@pytest.mark.parametrize("position, expected", [("before", "<image>\nQ?"), ("after", "Q?\n<image>")])
def test_image_position_places_the_tag(tok, position, expected):
    context = BuildContext(tokenizer=tok, seq_length=1024)
    encoder = energon_plugins.create("task_encoder", "llava", {"image_position": position}, context)
    assert encoder.user_text("Q?", 1) == expected
    assert encoder.user_text("<image> already tagged", 1) == "<image> already tagged"
