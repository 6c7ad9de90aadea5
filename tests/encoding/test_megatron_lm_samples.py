"""Megatron-LM's sample types through the built-in ``multimodal`` encoder and ``megatron-lm``.

Each dataset is written with Energon's prepare API and read by Energon's own loader
(``energon_plugins.testing.write_megatron_lm_dataset``). The rendered text of every sample is
checked against Megatron-LM's prompt formats written out literally; the ``megatron-lm`` batches
of a blend of text-only and image data go through the replayed ``get_batch`` and megatron-core's
own ``LLaVAModel._preprocess_data``.
"""

import types

import numpy as np
import pytest
import torch
from PIL import Image

import energon_plugins
from energon_plugins.testing import write_megatron_lm_dataset
from tests._loop_replay import IGNORE, llava_preprocess, loop_datamodule, mlm_get_batch, reference_next_token

SEQ = 160
IMAGE_TOKENS = 4  # the 28 px CLIP processor with 14 px patches
SYSTEM = "system: Answer the questions.\n"


def picture(seed, size=(28, 28)):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


OCR = [
    {"__key__": "ocr-plain", "images": [picture(1)], "text": "HELLO <image>WORLD\n"},
    {
        "__key__": "ocr-words",
        "images": [picture(2)],
        "text": "HELLO WORLD",
        "words_text": ["HELLO", "WORLD"],
        "words_boxes": [[1, 2, 10, 12], [12, 2.5, 30, 12]],
    },
    {"__key__": "ocr-one-box", "images": [picture(12)], "text": "TITLE", "words_boxes": [1, 2, 3, 4]},
    {
        "__key__": "ocr-quad",
        "images": [picture(3)],
        "text": "HI",
        "words_text": ["HI"],
        "words_boxes": [[0, 0, 9, 0, 9, 9, 0, 9]],
    },
]
MCQ = [
    {
        "__key__": "mcq-b",
        "images": [picture(4)],
        "context": "What shape?",
        "choices": ["circle", "square"],
        "correct_choice_idx": 1,
    },
    {
        "__key__": "mcq-tag",
        "images": [picture(5)],
        "context": "<image>Which?",
        "choices": ["a", "b", "c"],
        "correct_choice_idx": 0,
    },
]
SIM = [
    {
        "__key__": "sim-numbered",
        "images": [picture(6), picture(7)],
        "texts": [
            {"from": "human", "value": "Compare <image-2> with <image-1>."},
            {"from": "gpt", "value": "Same."},
        ],
    },
    {
        "__key__": "sim-repeated",
        "images": [picture(8)],
        "texts": [
            {"from": "human", "value": "<image> and <image>?"},
            {"from": "gpt", "value": "Twice."},
        ],
    },
    {
        "__key__": "sim-untagged",
        "images": [picture(9)],
        "texts": [
            {"from": "human", "value": "Describe."},
            {"from": "gpt", "value": "Dots."},
            {"from": "human", "value": "More?"},
            {"from": "gpt", "value": "No."},
        ],
    },
    {
        "__key__": "sim-text-only",
        "images": [],
        "texts": [{"from": "human", "value": "Say <image>hi."}, {"from": "gpt", "value": "Hi."}],
    },
    {
        "__key__": "sim-running",
        "images": [picture(10), picture(11)],
        "texts": ["First part. ", "Second part."],
        "matched_text_indices": [1, 0],
    },
]
TEXT = [{"__key__": f"text-{i}", "text": f"Plain text number {i}."} for i in range(6)]

#: key -> the rendered sample, images collapsed to one <image> each (Megatron-LM's formats).
EXPECTED = {
    "ocr-plain": f"<s>{SYSTEM}user: <image>\nTranscribe all the text you find.\nassistant: HELLO WORLD</s>\n",
    "ocr-words": f"<s>{SYSTEM}user: <image>\nRead every word in the image with its bounding box.\n"
    "assistant: <ref>HELLO</ref><box>(1,2),(10,12)</box><ref>WORLD</ref><box>(12,2.5),(30,12)</box></s>\n",
    "ocr-one-box": f"<s>{SYSTEM}user: <image>\nRead every word in the image with its bounding box.\n"
    "assistant: <ref>TITLE</ref><box>(1,2),(3,4)</box></s>\n",
    "ocr-quad": f"<s>{SYSTEM}user: <image>\nRead every word in the image with its bounding box.\n"
    "assistant: <ref>HI</ref><quad>(0,0),(9,0),(9,9),(0,9)</quad></s>\n",
    "mcq-b": f"<s>{SYSTEM}user: <image>\nWhat shape?\nA. circle\nB. square\n"
    "Answer with the option's letter from the given choices directly.\nassistant: B</s>\n",
    "mcq-tag": f"<s>{SYSTEM}user: <image>Which?\nA. a\nB. b\nC. c\n"
    "Answer with the option's letter from the given choices directly.\nassistant: A</s>\n",
    "sim-numbered": f"<s>{SYSTEM}user: Compare <image> with <image>.\nassistant: Same.</s>\n",
    "sim-repeated": f"<s>{SYSTEM}user: <image> and <image>?\nassistant: Twice.</s>\n",
    "sim-untagged": f"<s>{SYSTEM}user: <image>\nDescribe.\nassistant: Dots.</s>\nuser: More?\nassistant: No.</s>\n",
    "sim-text-only": f"<s>{SYSTEM}user: Say hi.\nassistant: Hi.</s>\n",
    "sim-running": "<image>First part. <image>Second part.</s>",
    **{r["__key__"]: f"{r['text']}</s>" for r in TEXT},
}
#: key -> the labelled text.
ANSWERS = {
    "ocr-plain": "HELLO WORLD</s>",
    "mcq-b": "B</s>",
    "sim-untagged": "Dots.</s>No.</s>",
    "sim-running": "First part. Second part.</s>",
    "text-0": "Plain text number 0.</s>",
}
#: key -> the images in the order the sample shows them (indices into its record's images).
IMAGE_ORDER = {"sim-numbered": [1, 0], "sim-repeated": [0, 0], "sim-running": [1, 0], "sim-text-only": []}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron-lm-samples")
    for name, sample_type, records in (
        ("ocr", "OCRSample", OCR),
        ("mcq", "MultiChoiceVQASample", MCQ),
        ("sim", "SimilarityInterleavedSample", SIM),
        ("text", "TextSample", TEXT),
    ):
        write_megatron_lm_dataset(root / name, sample_type, records, samples_per_shard=2)
    (root / "blend.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 1\n        path: text\n      - weight: 1\n        path: ocr\n"
    )
    return root


def rendered(tokenizer, ids, image_id):
    """The text of ``ids`` with each run of image tokens written as one ``<image>``."""
    ids = ids.tolist()
    kept = [t for i, t in enumerate(ids) if t != image_id or i == 0 or ids[i - 1] != image_id]
    return tokenizer.decode(kept)


def every_sample(dm, count):
    """``{key: (row of the batch, batch)}`` until ``count`` keys were seen (micro batch 1)."""
    found = {}
    loader = dm.train_dataloader()
    for _ in range(20 * count):
        batch = next(loader)
        found.setdefault(batch.__key__[0], batch)
        if len(found) == count:
            return found
    raise AssertionError(f"saw only {sorted(found)}")


@pytest.mark.parametrize(
    ("name", "records"),
    [("ocr", OCR), ("mcq", MCQ), ("sim", SIM), ("text", TEXT)],
    ids=["ocr", "mcq", "sim", "text"],
)
def test_each_sample_type_renders_megatron_lms_prompt_format(
    datasets, tokenizer, small_clip_processor, name, records
):
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(datasets / name), tokenizer, small_clip_processor, seq_length=SEQ, micro_batch_size=1,
        num_workers=0, batch_format=None, task_encoder={"name": "multimodal", "options": {"padding": "longest"}},
    )  # fmt: skip
    by_key = {r["__key__"]: r for r in records}
    for key, batch in every_sample(dm, len(records)).items():
        ids, labels = batch.input_ids[0], batch.labels[0]
        assert rendered(tokenizer, ids, image_id) == EXPECTED[key]
        if key in ANSWERS:
            assert tokenizer.decode(labels[labels != IGNORE]) == ANSWERS[key]
        order = IMAGE_ORDER.get(key, list(range(len(by_key[key].get("images", [])))))
        assert int((ids == image_id).sum()) == IMAGE_TOKENS * len(order)
        assert (labels[ids == image_id] == IGNORE).all(), "no loss on images"
        if order:
            originals = [by_key[key]["images"][i] for i in order]
            direct = small_clip_processor(images=originals, return_tensors="pt")["pixel_values"]
            assert torch.allclose(batch.pixel_values, direct, atol=1e-6), "images in the order shown"
        else:
            assert batch.pixel_values is None


def test_a_blend_of_text_and_ocr_reads_as_megatron_lm_trains(datasets, tokenizer, small_clip_processor):
    """``megatron-lm`` batches of text-only and OCR rows: through ``get_batch`` and
    ``LLaVAModel._preprocess_data``, the same sequence and next-token targets as the encoder's."""
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    info = types.SimpleNamespace(path=datasets / "blend.yaml")

    def make(batch_format):
        return loop_datamodule(
            info, tokenizer, small_clip_processor, seq=SEQ, mbs=2, image_tokens=IMAGE_TOKENS,
            batch_format=batch_format,
        )  # fmt: skip

    loader, reference = iter(make("megatron-lm").train_dataloader()), iter(make(None).train_dataloader())
    kinds = set()
    for _ in range(6):
        data, ref = next(loader), next(reference)
        kinds |= {key.split("-")[0] for key in data["__keys__"]}
        tokens, labels, loss_mask, _, imgs, num_tiles, _ = mlm_get_batch(data, pad_id=tokenizer.pad_token_id)
        images = int(ref.num_images.sum())
        assert int((tokens == image_id).sum()) == images == imgs.shape[0] == num_tiles.numel()
        ids, final_labels, final_mask = llava_preprocess(
            tokens, labels, loss_mask, num_tiles, image_token_index=image_id, img_seq_len=IMAGE_TOKENS
        )
        want = reference_next_token(ref)
        for row in range(2):
            real = int(ref.attention_mask[row].sum())
            expanded = ids[row, :real].clone()
            expanded[expanded == -1.0] = image_id
            assert torch.equal(expanded.long(), ref.input_ids[row, :real])
            on = final_mask[row, :real].bool()
            assert torch.equal(final_labels[row, :real][on], want[row, :real][on])
            assert bool(on.any())
    assert kinds == {"text", "ocr"}, "both datasets of the blend were read"


def test_text_only_image_gives_text_samples_a_blank_image(datasets, tokenizer, small_clip_processor):
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(datasets / "text"), tokenizer, small_clip_processor, seq_length=SEQ, micro_batch_size=2,
        num_workers=0, batch_format="megatron-lm",
        task_encoder={"name": "multimodal", "options": {"megatron_lm": {"text_only_image": True, "blank_image_size": 40}}},
    )  # fmt: skip
    data = next(dm.train_dataloader())
    assert data["num_tiles"].tolist() == [1, 1]
    assert (data["tokens"] == image_id).sum(dim=1).tolist() == [1, 1]
    white = small_clip_processor(images=[Image.new("RGB", (40, 40), (255, 255, 255))], return_tensors="pt")
    assert torch.allclose(data["imgs"][0], white["pixel_values"][0], atol=1e-6)


def test_prompts_are_options(datasets, tokenizer, small_clip_processor):
    options = {
        "padding": "longest",
        "megatron_lm": {"system_prompt": None, "ocr_prompt": "Read it.", "ocr_mode": "text"},
    }
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(datasets / "ocr"), tokenizer, small_clip_processor, seq_length=SEQ, micro_batch_size=1,
        num_workers=0, batch_format=None,
        task_encoder={"name": "multimodal", "options": options},
    )  # fmt: skip
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    for key, batch in every_sample(dm, len(OCR)).items():
        text = {
            "ocr-plain": "HELLO WORLD",
            "ocr-words": "HELLO WORLD",
            "ocr-one-box": "TITLE",
            "ocr-quad": "HI",
        }[key]
        want = f"<s>user: <image>\nRead it.\nassistant: {text}</s>\n"
        assert rendered(tokenizer, batch.input_ids[0], image_id) == want


def _sample(kind, **fields):
    import megatron.energon as energon

    return getattr(energon, kind)(__key__=f"bad-{kind}", __restore_key__=(), **fields)


BAD_SAMPLES = [
    (
        "more-tags-than-images",
        "SimilarityInterleavedSample",
        dict(
            images=[picture(1)],
            texts=[{"from": "human", "value": "<image-1> <image-3>"}, {"from": "gpt", "value": "x"}],
        ),
        ["image tags [1, 3] for 1 image"],
    ),
    (
        "three-tags-two-images",
        "SimilarityInterleavedSample",
        dict(
            images=[picture(1), picture(2)],
            texts=[{"from": "human", "value": "<image><image><image>"}, {"from": "gpt", "value": "x"}],
        ),
        ["3 image tags for 2 image"],
    ),
    (
        "unknown-role",
        "SimilarityInterleavedSample",
        dict(images=[], texts=[{"from": "robot", "value": "x"}]),
        ["conversation[0].from", "robot"],
    ),
    (
        "matched-index-out-of-range",
        "SimilarityInterleavedSample",
        dict(images=[picture(1)], texts=["a"], matched_text_indices=[3]),
        ["matched_text_indices [3]"],
    ),
    (
        "choice-index-out-of-range",
        "MultiChoiceVQASample",
        dict(image=picture(1), context="Q", choices=["a", "b"], correct_choice_idx=4),
        ["correct_choice_idx 4"],
    ),
    ("no-choices", "MultiChoiceVQASample", dict(image=picture(1), context="Q", choices=[]), ["0 choices"]),
    (
        "words-without-boxes",
        "OCRSample",
        dict(image=picture(1), text="a b", words_text=["a", "b"], words_boxes=[[1, 2, 3, 4]]),
        ["2 words", "1 boxes"],
    ),
    (
        "box-of-three-numbers",
        "OCRSample",
        dict(image=picture(1), text="a", words_text=["a"], words_boxes=[[1, 2, 3]]),
        ["3 numbers"],
    ),
    ("ocr-without-text", "OCRSample", dict(image=picture(1), text=" "), ["has no text"]),
    ("text-not-a-string", "TextSample", dict(text=["a"]), ["text is list"]),
]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("kind", "fields", "words"), [c[1:] for c in BAD_SAMPLES], ids=[c[0] for c in BAD_SAMPLES]
)
def test_bad_megatron_lm_samples_are_named(tokenizer, kind, fields, words):
    from megatron.energon.errors import FatalSampleError

    context = energon_plugins.BuildContext(
        tokenizer=tokenizer,
        image_processor=energon_plugins.create("image_processor", "hf", {"class_name": "CLIPImageProcessor"}),
        sample_config=energon_plugins.MultiModalSampleConfig(),
        seq_length=SEQ,
    )
    encoder = energon_plugins.create("task_encoder", "multimodal", {"on_error": "raise"}, context)
    with pytest.raises(FatalSampleError) as info:
        encoder.encode_sample(_sample(kind, **fields))
    for word in [f"bad-{kind}", *words]:
        assert word in str(info.value), str(info.value)
