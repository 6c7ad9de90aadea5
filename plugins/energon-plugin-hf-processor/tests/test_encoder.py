"""The ``hf-processor`` encoder's sample kinds, budgets, errors, packing resume and family table."""

import dataclasses
import re

import pytest
import torch
from energon_plugin_hf_processor import families
from energon_plugin_hf_processor.encoder import HFProcessorTaskEncoder
from energon_plugin_hf_processor.options import HFProcessorOptions

import energon_plugins
from energon_plugins import BuildContext, ChatMLSample, ConfigError

IGNORE = -100


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    from energon_plugins.testing import write_dataset

    root = tmp_path_factory.mktemp("hf-demo-data")
    common = dict(
        num_samples=8, samples_per_shard=4, image_size=((20, 20), (64, 48)), split_ratio=(("train", 1.0),)
    )
    return {
        kind: write_dataset(root / kind, kind=kind, seed=n, **common)
        for n, kind in enumerate(("vqa", "captioning", "interleaved", "chatml"))
    }


def encoder(processor_dirs, name, seq_length=2048, **options):
    return HFProcessorTaskEncoder(
        BuildContext(seq_length=seq_length),
        HFProcessorOptions(processor=str(processor_dirs[name]), **options),
    )


def conversation(images, *turns):
    return ChatMLSample(
        __key__="k",
        __restore_key__=(),
        conversation=[{"role": r, "content": c} for r, c in turns],
        images=list(images),
    )


def test_the_plugin_is_registered_through_its_entry_point():
    entry = next(e for e in energon_plugins.available("task_encoder") if e.name == "hf-processor")
    assert entry.distribution == "energon-plugin-hf-processor"


@pytest.mark.parametrize("family", ["qwen2-vl", "idefics3", "llava-next"])
@pytest.mark.parametrize("kind", ["vqa", "captioning", "interleaved"])
def test_vqa_captioning_and_interleaved_samples_equal_the_processor(
    family, kind, demo_data, processor_dirs, make_datamodule, every_batch
):
    """VQA is ``user: [image, question]``, ``assistant: answer``; captioning asks the caption
    prompt; interleaved text is the template's image placeholder between the texts, every
    text token labelled, eos appended."""
    from PIL import Image
    from transformers import AutoProcessor

    info = demo_data[kind]
    processor = AutoProcessor.from_pretrained(processor_dirs[family], local_files_only=True)
    dm = make_datamodule(info.path, processor_dirs[family], processor.tokenizer, packed=False)
    enc = encoder(processor_dirs, family)
    checked = 0
    for batch in every_batch(dm, list(info.samples)):
        for row, key in enumerate(batch.__key__):
            record = info.samples[key]
            images = [Image.open(p).convert("RGB") for p in _pngs(info, key)]
            if kind == "interleaved":
                text = "".join(
                    enc.image_placeholder if "image" in item else item["text"] for item in record["sequence"]
                )
                ref = processor(text=[text], images=[images], return_tensors="pt")
                expected = torch.cat([ref["input_ids"][0], torch.tensor([processor.tokenizer.eos_token_id])])
            else:
                question = record.get("context", "Describe this image.")
                answer = record["answers"][0] if "answers" in record else record["caption"]
                messages = [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "image": images[0]},
                            {"type": "text", "text": question},
                        ],
                    },
                    {"role": "assistant", "content": [{"type": "text", "text": answer}]},
                ]
                ref = processor.apply_chat_template(
                    messages, tokenize=True, return_dict=True, return_tensors="pt"
                )
                expected = ref["input_ids"][0]
            n = len(expected)
            assert torch.equal(batch.input_ids[row, :n], expected), key
            labels = batch.labels[row, :n]
            labelled = processor.tokenizer.decode(expected[labels != IGNORE])
            if kind != "interleaved":
                assert labelled.strip().startswith(answer)
            assert not torch.isin(expected[labels != IGNORE], torch.tensor([enc.image_token_id])).any()
            checked += 1
    assert checked >= len(info.samples)


def _pngs(info, key):
    """The PNG files the demo generator wrote for ``key`` (read back from the shards)."""
    import io
    import tarfile

    found = {}
    for shard in info.shards:
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                base, _, ext = member.name.partition(".")
                if base == key and ext.endswith("png"):
                    found[ext] = io.BytesIO(tar.extractfile(member).read())
    return [found[e] for e in sorted(found, key=lambda e: int(re.sub(r"\D", "", e) or -1))]


def test_too_long_and_too_many_images_are_skipped_and_counted_or_raise(processor_dirs, make_image):
    from megatron.energon import SkipSample
    from megatron.energon.errors import FatalSampleError

    images = [make_image((40, 40), i) for i in range(3)]
    sample = conversation(images, ("user", "<image><image><image>Which?"), ("assistant", "The last."))
    enc = encoder(processor_dirs, "qwen2-vl", max_images=2)
    with pytest.raises(SkipSample):
        enc.encode_sample(sample)
    assert enc.error_counts() == {"too_many_images": 1}
    with pytest.raises(FatalSampleError, match="3 images > max_images 2"):
        encoder(processor_dirs, "qwen2-vl", max_images=2, on_error="raise").encode_sample(sample)
    short = encoder(processor_dirs, "qwen2-vl", seq_length=40)
    with pytest.raises(SkipSample):
        short.encode_sample(sample)
    assert short.error_counts() == {"too_long": 1}
    with pytest.raises(FatalSampleError, match="tokens > seq_length 40"):
        encoder(processor_dirs, "qwen2-vl", seq_length=40, on_error="raise").encode_sample(sample)


def test_min_and_max_pixels_set_the_visual_token_budget(processor_dirs, make_image):

    sample = conversation([make_image((112, 112), 0)], ("user", "<image>Q"), ("assistant", "A."))
    small = encoder(processor_dirs, "qwen2-vl", max_pixels=28 * 28).encode_sample(sample)
    large = encoder(processor_dirs, "qwen2-vl", min_pixels=112 * 112, max_pixels=112 * 112).encode_sample(
        sample
    )
    assert small.image_token_counts == [1] and small.image_grid_thw.tolist() == [[1, 2, 2]]
    assert large.image_token_counts == [16] and large.image_grid_thw.tolist() == [[1, 8, 8]]
    with pytest.raises(ConfigError, match="task_encoder.options.max_pixels"):
        encoder(processor_dirs, "llava", max_pixels=1000)


def test_bad_settings_fail_when_the_encoder_is_built(processor_dirs, tmp_path):
    with pytest.raises(ConfigError, match="is not a directory"):
        HFProcessorTaskEncoder(BuildContext(), HFProcessorOptions(processor=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="AutoProcessor cannot load"):
        HFProcessorTaskEncoder(BuildContext(), HFProcessorOptions(processor=str(tmp_path)))
    with pytest.raises(ConfigError, match="family: no family 'nope'"):
        encoder(processor_dirs, "qwen2-vl", family="nope")
    with pytest.raises(ConfigError, match="failed on a test sample"):
        encoder(processor_dirs, "qwen2-vl", processor_kwargs={"merge_size": 0})
    with pytest.raises(energon_plugins.PluginOptionsError, match="min_pixels"):
        energon_plugins.create(
            "task_encoder", "hf-processor", {"processor": "x", "min_pixels": 9, "max_pixels": 4}
        )


def test_the_processor_defaults_to_the_tokenizer_directory(processor_dirs):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(processor_dirs["gemma3"]))
    enc = energon_plugins.create(
        "task_encoder", "hf-processor", None, BuildContext(tokenizer=tok, seq_length=512)
    )
    assert enc.family.name == "gemma3"


def test_a_conversation_without_matching_images_is_skipped_as_a_mismatch(processor_dirs, make_image):

    enc = encoder(processor_dirs, "llava")
    from megatron.energon import SkipSample

    with pytest.raises(SkipSample):
        enc.encode_sample(conversation([make_image((30, 30), 1)], ("user", "No tag."), ("assistant", "A.")))
    with pytest.raises(SkipSample):
        enc.encode_sample(conversation([], ("user", "<image>"), ("assistant", "A.")))
    assert enc.error_counts() == {"ImageCountMismatchError": 2}


@pytest.mark.parametrize("carry_over", [False, True], ids=["plain", "carry-over"])
def test_resume_with_packing_gives_the_same_batches(carry_over, demo_data, processor_dirs):
    """Encoding is stateless and lengths are exact before packing: a restored loader continues
    exactly, with every packing strategy's carry-over too."""
    from transformers import AutoTokenizer

    info = demo_data["chatml"]
    tok = AutoTokenizer.from_pretrained(str(processor_dirs["llava-next"]))

    def loader():
        strategy = energon_plugins.create(
            "packing_strategy", "best-fit-decreasing", {"carry_over": carry_over}
        )
        return energon_plugins.EnergonMultiModalDataModule(
            str(info.path),
            tok,
            None,
            seq_length=256,
            micro_batch_size=2,
            num_workers=0,
            shuffle_buffer_size=4,
            packing=strategy,
            packing_buffer_size=5,
            task_encoder={"name": "hf-processor", "options": {"padding": "longest"}},
            batch_format=None,  # the task encoder's own batch
        ).train_dataloader()

    first = loader()
    for _ in range(2):
        next(first)
    state = first.save_state()
    expected = [next(first) for _ in range(3)]
    second = loader()
    second.restore_state(state)
    for want in expected:
        got = next(second)
        assert got.__key__ == want.__key__
        assert torch.equal(got.input_ids, want.input_ids)
        assert torch.equal(got.pixel_values, want.pixel_values)
        assert torch.equal(got.visual["image_sizes"], want.visual["image_sizes"])


def test_combine_rules_match_the_processors_own_batching(processor_dirs, make_image):
    """``pad_concat`` of per-sample outputs is what LLaVA-NeXT's processor makes of a batch."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs["llava-next"], local_files_only=True)
    texts = ["<image>a", "<image><image>b"]
    images = [[make_image((60, 20), 1)], [make_image((28, 28), 2), make_image((20, 50), 3)]]
    together = processor(text=texts, images=images, return_tensors="pt", padding=True)
    alone = [processor(text=[t], images=[i], return_tensors="pt") for t, i in zip(texts, images)]
    spec = families.family_for(processor)
    assert torch.equal(
        spec.combine("pixel_values")([a["pixel_values"] for a in alone]), together["pixel_values"]
    )
    rows = families.image_row([torch.ones(1, 2, 3, 4, 4), torch.ones(1, 1, 3, 4, 4)])
    assert rows.shape == (1, 3, 3, 4, 4)


def test_a_family_registered_by_a_plugin_drives_the_layout(processor_dirs):
    """``register_family`` (or the entry-point group) extends the table; unknown processors
    get the generic spec, guessed from the output shapes."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(processor_dirs["llava"], local_files_only=True)

    class MyLlavaProcessor(type(processor)):
        pass

    mine = MyLlavaProcessor.__new__(MyLlavaProcessor)
    assert families.family_for(mine).name == "llava"  # base classes are looked up too
    spec = families.register_family(
        dataclasses.replace(
            families.family_for(processor),
            name="my-llava",
            processors=("MyLlavaProcessor",),
            pixel_values="pad_concat",
        )
    )
    try:
        assert families.family_for(mine) is spec
        with pytest.raises(ValueError, match="already served"):
            families.register_family(dataclasses.replace(spec, name="other"))
    finally:
        families._by_processor.pop("MyLlavaProcessor")
        families._by_name.pop("my-llava")
    generic = families.generic_layout(
        {
            "input_ids": torch.zeros(1, 7),
            "pixel_values": torch.zeros(2, 3, 4, 4),
            "image_sizes": torch.zeros(2, 2),
            "token_type_ids": torch.zeros(1, 7),
        },
        2,
        7,
    )
    assert generic.visual == {"image_sizes": "pad_concat"} and generic.token_fields == ("token_type_ids",)
    with pytest.raises(ValueError, match="combine rule 'nope'"):
        families.FamilySpec("bad", (), pixel_values="nope")
