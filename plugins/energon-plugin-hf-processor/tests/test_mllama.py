"""Mllama (Llama 3.2 Vision): per-row vision inputs, golden against the processor, and a model.

Mllama's processor gives per-row outputs (``pixel_values`` ``(1, images, tiles, C, H, W)``,
``aspect_ratio_ids``, ``aspect_ratio_mask``, ``cross_attention_mask`` ``(1, L, images,
tiles)``), so its batches are checked here rather than by test_golden.py's per-key combine:
every row's images, ratios and cross-attention block equal the processor's output of each of
its samples (a packed row: block-diagonal, each sample's tokens seeing only its own images),
padding images and tokens are zero, and unpacked batches whose rows all hold images equal the
processor's own batched call. Its real template refuses a system turn beside images, so the
dataset here has a system turn only in a text-only conversation. A tiny random
``MllamaForConditionalGeneration`` (a cross-attention layer in its two-layer text model)
takes every batch, text-only rows beside image rows and a batch without images, with a
finite loss.
"""

import pytest
import torch
from energon_plugin_hf_processor.batch_layouts import cross_attention_spans
from energon_plugin_hf_processor.families import FamilySpec

FAMILY = "mllama"
END_OF_TURN = "<|eot_id|>"

# (image sizes (w, h), conversation); in this order the unpacked batches of two are: two image
# rows, a text row beside an image row, two text rows, two image rows.
CONVERSATIONS = {
    "single": (
        [(40, 60)],
        [
            {"from": "human", "value": "<image>\nWhat color is the square?"},
            {"from": "gpt", "value": "The square is red."},
        ],
    ),
    "multi": (  # consecutive image tokens: both images run to the end
        [(70, 30), (30, 30)],
        [
            {"from": "human", "value": "<image>\n<image>\nWhich one is larger?"},
            {"from": "gpt", "value": "The first one."},
        ],
    ),
    "text": (
        [],
        [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello."}],
    ),
    "turns": (
        [(56, 44)],
        [
            {"from": "human", "value": "<image>\nHow many circles are there?"},
            {"from": "gpt", "value": "There are 3 circles."},
            {"from": "human", "value": "What color is the background?"},
            {"from": "gpt", "value": "The background is blue."},
        ],
    ),
    "system-text": (
        [],
        [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "One?"},
            {"role": "assistant", "content": "One."},
        ],
    ),
    "twotext": (
        [],
        [
            {"from": "human", "value": "One?"},
            {"from": "gpt", "value": "One."},
            {"from": "human", "value": "Two?"},
            {"from": "gpt", "value": "Two."},
        ],
    ),
    "apart": (  # the first image's span ends at the second image's token
        [(90, 50), (30, 60)],
        [
            {"from": "human", "value": "<image>\nWhat is this?"},
            {"from": "gpt", "value": "A square."},
            {"from": "human", "value": "<image>\nAnd this?"},
            {"from": "gpt", "value": "A circle."},
        ],
    ),
    "late": (  # tokens before the image see nothing
        [(28, 28)],
        [
            {"from": "human", "value": "Hi."},
            {"from": "gpt", "value": "Hello."},
            {"from": "human", "value": "<image>\nWhat is it?"},
            {"from": "gpt", "value": "A dot."},
        ],
    ),
}


@pytest.fixture(scope="module")
def mllama_data(tmp_path_factory, make_image):
    """A crude ``chatml`` Energon dataset of :data:`CONVERSATIONS`: ``(path, originals)``."""
    from energon_plugins.testing import write_crude_dataset

    root = tmp_path_factory.mktemp("hf-mllama")
    originals, samples = {}, []
    for n, (key, (sizes, conversation)) in enumerate(CONVERSATIONS.items()):
        images = [make_image(size, 100 * n + i) for i, size in enumerate(sizes)]
        originals[key] = (images, conversation)
        samples.append((key, images, conversation))
    write_crude_dataset(root, samples, fmt="chatml", samples_per_shard=2, split_ratio=(("train", 1.0),))
    return root, originals


@pytest.fixture(scope="module")
def processor(processor_dirs):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(processor_dirs[FAMILY], local_files_only=True)


def _reference(processor, golden, originals, key):
    images, conversation = originals[key]
    return processor.apply_chat_template(
        golden.hf_messages(conversation, images), tokenize=True, return_dict=True, return_tensors="pt"
    )


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_rows_equal_the_processors_output(
    packed, processor, processor_dirs, mllama_data, make_datamodule, every_batch, golden
):
    from energon_plugin_hf_processor.families import family_for

    assert family_for(processor).name == FAMILY
    path, originals = mllama_data
    dm = make_datamodule(path, processor_dirs[FAMILY], processor.tokenizer, packed=packed)
    checked, packed_rows, mixed_batches = set(), 0, 0
    for batch in every_batch(dm, list(originals)):
        row_keys = [key.split(",") for key in batch.__key__]
        refs = {k: _reference(processor, golden, originals, k) for keys in row_keys for k in keys}
        if not any("pixel_values" in refs[k] for keys in row_keys for k in keys):
            assert batch.pixel_values is None and not batch.visual  # text alone
        else:
            mixed_batches += _check_rows(batch, row_keys, refs)
            if not packed and all("pixel_values" in refs[keys[0]] for keys in row_keys):
                _check_processor_batch(batch, processor, golden, originals, [k for (k,) in row_keys])
        for row, keys in enumerate(row_keys):
            start = 0
            for key in keys:
                end = start + refs[key]["input_ids"].shape[1]
                ids, labels = batch.input_ids[row, start:end], batch.labels[row, start:end]
                assert torch.equal(ids, refs[key]["input_ids"][0]), key
                answers = golden.answers(originals[key][1])
                golden.check_labels(processor.tokenizer, refs[key], ids, labels, answers, END_OF_TURN)
                checked.add(key)
                start = end
            packed_rows += len(keys) > 1
    assert checked == set(originals)
    assert (packed_rows > 0) == packed
    assert packed or mixed_batches  # a text-only row beside an image row was laid out


def _check_rows(batch, row_keys, refs):
    """Each row's images and cross-attention blocks are its samples' own; the rest is padding.

    Returns whether a text-only row sat beside an image row."""
    counts = [
        sum(refs[k]["pixel_values"].shape[1] for k in keys if "pixel_values" in refs[k]) for keys in row_keys
    ]
    assert batch.num_images.tolist() == counts
    most = max(counts)
    pixels, visual = batch.pixel_values, batch.visual
    assert pixels.shape[:2] == (len(row_keys), most)
    cross = visual["cross_attention_mask"]
    assert cross.shape == (len(row_keys), batch.input_ids.shape[1], most, pixels.shape[2])
    marked = 0
    for row, keys in enumerate(row_keys):
        start, image = 0, 0
        for key in keys:
            ref = refs[key]
            end = start + ref["input_ids"].shape[1]
            if "pixel_values" in ref:
                n = ref["pixel_values"].shape[1]
                own = slice(image, image + n)
                assert torch.equal(pixels[row, own], ref["pixel_values"][0]), key
                assert torch.equal(visual["aspect_ratio_ids"][row, own], ref["aspect_ratio_ids"][0]), key
                assert torch.equal(visual["aspect_ratio_mask"][row, own], ref["aspect_ratio_mask"][0]), key
                assert torch.equal(cross[row, start:end, own], ref["cross_attention_mask"][0].long()), key
                marked += int(ref["cross_attention_mask"].sum())
                image += n
            start = end
        padding = slice(image, most)  # padding images: as the processor pads a batch
        assert not pixels[row, padding].any() and not visual["aspect_ratio_ids"][row, padding].any()
        assert (visual["aspect_ratio_mask"][row, padding] == torch.tensor([1, 0, 0, 0])).all()
    assert int(cross.sum()) == marked  # nothing outside the samples' own blocks
    return any(c == 0 for c in counts)


def _check_processor_batch(batch, processor, golden, originals, keys):
    """Unpacked rows that all hold images equal the processor's own call on the batch (its
    cross-attention mask also marks the right padding after a row's last image: compared on
    real tokens)."""
    texts, images = [], []
    for key in keys:
        row_images, conversation = originals[key]
        texts.append(
            processor.apply_chat_template(golden.hf_messages(conversation, row_images), tokenize=False)
        )
        images.append(row_images)
    ref = processor(text=texts, images=images, padding=True, add_special_tokens=False, return_tensors="pt")
    assert torch.equal(batch.input_ids[:, : ref["input_ids"].shape[1]], ref["input_ids"])
    assert torch.equal(batch.pixel_values, ref["pixel_values"])
    for key in ("aspect_ratio_ids", "aspect_ratio_mask"):
        assert torch.equal(batch.visual[key], ref[key]), key
    real = ref["attention_mask"].bool()
    assert torch.equal(
        batch.visual["cross_attention_mask"][real], torch.as_tensor(ref["cross_attention_mask"])[real]
    )


def _hf_kwargs(batch):
    kwargs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask.long(),
        "labels": batch.labels,
    }
    if batch.pixel_values is not None:
        kwargs["pixel_values"] = batch.pixel_values
    kwargs.update(batch.visual or {})
    return kwargs


def test_a_tiny_mllama_consumes_every_batch(
    processor, processor_dirs, mllama_data, make_datamodule, every_batch
):
    """Image rows and text-only rows beside image rows; then a batch without images, which
    reaches the model without vision inputs and trains."""
    from energon_plugin_hf_processor.tiny import TINY_SPECS

    from energon_plugins import ChatMLSample

    path, originals = mllama_data
    torch.manual_seed(0)
    model = TINY_SPECS[FAMILY].model(processor.tokenizer).eval()
    assert model.config.text_config.cross_attention_layers == [1]
    dm = make_datamodule(path, processor_dirs[FAMILY], processor.tokenizer, packed=False)
    seen_images, text_rows = 0, 0
    for batch in every_batch(dm, list(originals)):
        with torch.no_grad():
            out = model(**_hf_kwargs(batch))
        assert torch.isfinite(out.loss), batch.__key__
        seen_images += int(batch.num_images.sum())
        text_rows += int((batch.num_images == 0).sum())
    assert seen_images >= sum(len(images) for images, _ in originals.values()) and text_rows
    encoder = dm.task_encoder
    rows = [
        encoder.encode_sample(
            ChatMLSample(__key__=key, __restore_key__=(), conversation=originals[key][1], images=[])
        )
        for key in ("text", "system-text")  # role and content turns, as ChatMLSample holds them
    ]
    batch = encoder.batch(rows)
    assert batch.pixel_values is None and not batch.visual
    out = model.train()(**_hf_kwargs(batch))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert torch.isfinite(model.get_input_embeddings().weight.grad).all()


@pytest.mark.parametrize(
    "ids",
    [[5, 6, 7], [1, 9, 5, 6], [9, 9, 5, 6, 7], [1, 9, 5, 9, 6], [9, 5, 9, 9, 6, 7], [5, 6, 9]],
    ids=["none", "one", "consecutive", "apart", "apart-then-consecutive", "last-token"],
)
def test_cross_attention_spans_follow_transformers(ids):
    from transformers.models.mllama.processing_mllama import get_cross_attention_token_mask

    expected = [(a, len(ids) if b == -1 else b) for a, b in get_cross_attention_token_mask(ids, 9)]
    assert cross_attention_spans(ids, 9) == expected


@pytest.mark.bad_input
def test_an_unknown_batch_layout_is_refused_by_name():
    with pytest.raises(ValueError, match=r"family 'mine': batch layout 'rows'.*mllama"):
        FamilySpec("mine", ("MyProcessor",), batch_layout="rows")


@pytest.mark.parametrize(
    "text",
    ["<|image|>Hello <|image|>world", "<|image|><|image|>Two.", "No image.", "<|begin_of_text|>A <|image|>."],
    ids=["leading-and-inner", "leading-pair", "text-only", "with-bos"],
)
def test_placeholder_offsets_are_the_processors_edits(processor, text):
    """Mllama's computed offsets point at the tokens the processor made: each image token, and
    the bos token it puts after the leading image tokens of a text without one."""
    from energon_plugin_hf_processor.placeholder_offsets import PLACEHOLDER_OFFSETS

    images = [torch.zeros(3, 28, 28, dtype=torch.uint8)] * text.count("<|image|>")
    out = processor(
        text=[text],
        images=[images] if images else None,
        add_special_tokens=False,
        return_offsets_mapping=True,
    )
    tokens = {tuple(span): token for span, token in zip(out["offset_mapping"][0], out["input_ids"][0])}
    records = PLACEHOLDER_OFFSETS["mllama"](processor, text)
    assert [r["type"] for r in records].count("image") == len(images)
    for record in records:
        expected = processor.image_token_id if record["type"] == "image" else processor.tokenizer.bos_token_id
        assert tokens[tuple(record["new_span"])] == expected, record
    assert len(tokens) - len(records) == len(
        processor.tokenizer(text, add_special_tokens=False)["input_ids"]
    ) - len(images)


def test_tile_grids_are_transformers_aspect_ratios_and_stitch_split_tiles_back():
    import numpy as np
    from energon_plugin_hf_processor.image_preview import stitched_tiles, tile_grids
    from transformers.models.mllama.image_processing_mllama import get_all_supported_aspect_ratios
    from transformers.models.mllama.image_processing_pil_mllama import split_to_tiles_np

    assert tile_grids(4) == [tuple(g) for g in get_all_supported_aspect_ratios(4)]
    rng = np.random.default_rng(0)
    for rows, columns in tile_grids(4):
        canvas = rng.random((3, 5 * rows, 5 * columns)).astype(np.float32)
        tiles = torch.from_numpy(split_to_tiles_np(canvas, rows, columns))
        padded = torch.cat([tiles, torch.zeros(4 - len(tiles), *tiles.shape[1:])])  # to max tiles
        assert torch.equal(stitched_tiles(padded, (rows, columns)), torch.from_numpy(canvas))


def test_preview_draws_each_image_as_its_stitched_canvas(
    processor, processor_dirs, mllama_data, make_datamodule, every_batch
):
    """``preview_images`` gives each row's images, each the ``(C, rows*T, columns*T)`` canvas of
    its tile grid; its first tile is the batch's first tile of that image."""
    path, originals = mllama_data
    dm = make_datamodule(path, processor_dirs[FAMILY], processor.tokenizer, packed=False)
    encoder, drawn_images = dm.task_encoder, 0
    tile = processor.image_processor.size["height"]
    for batch in every_batch(dm, list(originals)):
        drawn = encoder.preview_images(batch)
        assert [len(row) for row in drawn] == batch.num_images.tolist()
        for row, images in enumerate(drawn):
            for image, canvas in enumerate(images):
                tiles = int(batch.visual["aspect_ratio_mask"][row, image].sum())
                assert canvas.shape[0] == 3 and canvas.shape[1] * canvas.shape[2] == tiles * tile * tile
                assert torch.equal(canvas[:, :tile, :tile], batch.pixel_values[row, image, 0])
                drawn_images += 1
    assert drawn_images >= sum(len(images) for images, _ in originals.values())
