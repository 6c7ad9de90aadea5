"""Megatron-LM's sample types through the ``hf-processor`` encoder, equal to the processor.

Energon's ``OCRSample``, ``MultiChoiceVQASample``, ``SimilarityInterleavedSample`` and
``TextSample`` datasets are written with Energon's prepare API and read by its loader. Each
sample's tokens must equal ``processor.apply_chat_template`` on the conversation in Megatron-LM's
prompt format (written out here), or the processor on the running text (eos appended); a blend
of text-only and OCR data in the ``megatron-lm`` batch format goes through a replay of
Megatron-LM's ``get_batch`` and megatron-core's ``LLaVAModel._preprocess_data``.
"""

import types

import numpy as np
import pytest
import torch
from PIL import Image

import energon_plugins
from energon_plugins.testing import write_megatron_lm_dataset

SYSTEM = {"role": "system", "content": "Answer the questions."}
INSTRUCTION = "Answer with the option's letter from the given choices directly."


def picture(seed, size=(40, 30)):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


RECORDS = {
    "OCRSample": [
        {"__key__": "ocr-plain", "images": [picture(1)], "text": "HELLO WORLD"},
        {
            "__key__": "ocr-words",
            "images": [picture(2)],
            "text": "HI",
            "words_text": ["HI"],
            "words_boxes": [[1, 2, 10, 12]],
        },
    ],
    "MultiChoiceVQASample": [
        {
            "__key__": "mcq",
            "images": [picture(3)],
            "context": "What shape?",
            "choices": ["circle", "square"],
            "correct_choice_idx": 1,
        },
    ],
    "SimilarityInterleavedSample": [
        {
            "__key__": "sim-numbered",
            "images": [picture(4), picture(5, (30, 30))],
            "texts": [
                {"from": "human", "value": "Compare <image-2> with <image-1>."},
                {"from": "gpt", "value": "Same."},
            ],
        },
        {
            "__key__": "sim-text-only",
            "images": [],
            "texts": [{"from": "human", "value": "Hi?"}, {"from": "gpt", "value": "Hi."}],
        },
        {
            "__key__": "sim-running",
            "images": [picture(6)],
            "texts": ["One. ", "Two."],
            "matched_text_indices": [1],
        },
    ],
    "TextSample": [{"__key__": f"text-{i}", "text": f"Plain text {i}."} for i in range(4)],
}
#: key -> (GPT-style conversation in Megatron-LM's format, indices of the images in tag order)
CONVERSATIONS = {
    "ocr-plain": (
        [
            SYSTEM,
            {"role": "user", "content": "<image>\nTranscribe all the text you find."},
            {"role": "assistant", "content": "HELLO WORLD"},
        ],
        [0],
    ),
    "ocr-words": (
        [
            SYSTEM,
            {"role": "user", "content": "<image>\nRead every word in the image with its bounding box."},
            {"role": "assistant", "content": "<ref>HI</ref><box>(1,2),(10,12)</box>"},
        ],
        [0],
    ),
    "mcq": (
        [
            SYSTEM,
            {"role": "user", "content": f"<image>\nWhat shape?\nA. circle\nB. square\n{INSTRUCTION}"},
            {"role": "assistant", "content": "B"},
        ],
        [0],
    ),
    "sim-numbered": (
        [
            SYSTEM,
            {"role": "user", "content": "Compare <image> with <image>."},
            {"role": "assistant", "content": "Same."},
        ],
        [1, 0],
    ),
    "sim-text-only": (
        [SYSTEM, {"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hi."}],
        [],
    ),
}
#: key -> running text (``None`` at each image) and its images.
RUNNING = {
    "sim-running": (["One. ", None, "Two."], [0]),
    **{f"text-{i}": ([f"Plain text {i}."], []) for i in range(4)},
}
KEYS = {r["__key__"]: (kind, r) for kind, records in RECORDS.items() for r in records}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-megatron-lm")
    for kind, records in RECORDS.items():
        write_megatron_lm_dataset(root / kind, kind, records, samples_per_shard=2)
    (root / "blend.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        "      - weight: 1\n        path: TextSample\n      - weight: 1\n        path: OCRSample\n"
    )
    return root


def reference(processor, encoder, key, golden):
    """``(expected ids, processor output, answers)`` of sample ``key``, built by transformers."""
    record = KEYS[key][1]
    if key in RUNNING:
        pieces, order = RUNNING[key]
        text = "".join(encoder.image_placeholder if p is None else p for p in pieces)
        images = [record["images"][i] for i in order]
        out = processor(text=[text], images=[images] if images else None, return_tensors="pt")
        ids = torch.cat([out["input_ids"][0], torch.tensor([processor.tokenizer.eos_token_id])])
        return ids, out, None
    conversation, order = CONVERSATIONS[key]
    messages = golden.hf_messages(conversation, [record["images"][i] for i in order])
    out = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    return out["input_ids"][0], out, golden.answers(conversation)


@pytest.mark.parametrize("family", ["qwen2-vl", "internvl"])
@pytest.mark.parametrize("kind", list(RECORDS))
def test_each_sample_type_equals_the_processor_on_megatron_lms_format(
    family, kind, datasets, processor_dirs, make_datamodule, every_batch, golden
):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    encoder = HFProcessorTaskEncoder(
        energon_plugins.BuildContext(seq_length=2048),
        HFProcessorOptions(processor=str(processor_dirs[family])),
    )
    dm = make_datamodule(datasets / kind, processor_dirs[family], processor.tokenizer, packed=False)
    checked = set()
    for batch in every_batch(dm, [r["__key__"] for r in RECORDS[kind]]):
        for row, key in enumerate(batch.__key__):
            expected, out, answers = reference(processor, encoder, key, golden)
            n = len(expected)
            ids, labels = batch.input_ids[row, :n], batch.labels[row, :n]
            assert torch.equal(ids, expected), key
            if answers is None:  # running text: every text token labelled, eos too
                text = "".join(p for p in RUNNING[key][0] if p is not None)
                labelled = processor.tokenizer.decode(ids[labels != -100], skip_special_tokens=True)
                assert labelled.split() == text.split(), "the texts (the placeholder's own newline aside)"
                assert int(labels[-1]) == processor.tokenizer.eos_token_id
                assert not bool(torch.isin(ids[labels != -100], torch.tensor([encoder.image_token_id])).any())
            else:
                golden.check_labels(
                    processor.tokenizer, out, ids, labels, answers, golden.END_OF_TURN[family]
                )
            checked.add(key)
    assert checked == {r["__key__"] for r in RECORDS[kind]}


def test_a_blend_of_text_and_ocr_in_the_megatron_lm_format(datasets, processor_dirs):
    """Text-only and OCR rows of one batch, read as Megatron-LM's ``get_batch`` and
    ``LLaVAModel`` read them: the expanded sequence is the encoder's row again."""
    from transformers import AutoProcessor

    from tests._loop_replay import llava_preprocess, mlm_get_batch

    processor = AutoProcessor.from_pretrained(processor_dirs["llava"], local_files_only=True)
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)

    def loader(batch_format):
        return energon_plugins.EnergonMultiModalDataModule(
            str(datasets / "blend.yaml"), processor.tokenizer, None, seq_length=1024, micro_batch_size=2,
            num_workers=0, shuffle_buffer_size=None, batch_format=batch_format,
            task_encoder={"name": "hf-processor", "options": {"processor": str(processor_dirs["llava"])}},
        ).train_dataloader()  # fmt: skip

    mlm, own = loader("megatron-lm"), loader(None)
    sources = set()
    for _ in range(4):
        data, ref = next(mlm), next(own)
        sources |= {key.split("-")[0] for key in data["__keys__"]}
        tokens, labels, mask, _, imgs, num_tiles, _ = mlm_get_batch(
            data, pad_id=processor.tokenizer.pad_token_id
        )
        images = int(ref.num_images.sum())
        assert int((tokens == image_id).sum()) == images == num_tiles.numel() == imgs.shape[0]
        per_image = int(ref.image_token_counts[0]) if images else 1
        expanded, _, _ = llava_preprocess(
            tokens, labels, mask, num_tiles, image_token_index=image_id, img_seq_len=per_image
        )
        for row in range(2):
            real = int(ref.attention_mask[row].sum())
            seq = expanded[row, :real].clone()
            seq[seq == -1.0] = image_id
            assert torch.equal(seq.long(), ref.input_ids[row, :real])
    assert sources == {"text", "ocr"}


def test_text_only_image_puts_a_blank_image_before_the_text(processor_dirs):
    from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
    from energon_plugin_hf_processor.options import HFProcessorOptions
    from megatron.energon import TextSample

    options = HFProcessorOptions(
        processor=str(processor_dirs["qwen2-vl"]),
        megatron_lm={"text_only_image": True, "blank_image_size": 56},
    )
    encoder = HFProcessorTaskEncoder(energon_plugins.BuildContext(seq_length=2048), options)
    sample = TextSample(__key__="t", __restore_key__=(), text="Plain words.")
    encoded = encoder.encode_sample(sample)
    assert encoded.num_images == 1 and encoded.image_grid_thw.tolist() == [[1, 4, 4]]
    white = types.SimpleNamespace(
        **encoder.processor.image_processor(images=[Image.new("RGB", (56, 56), "white")], return_tensors="pt")
    )
    assert torch.equal(encoded.pixel_values, white.pixel_values)
