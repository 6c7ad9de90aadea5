"""The built-in ``multimodal`` task encoder and the ``PluginTaskEncoder`` base, on real data."""

import io
import tarfile

import pytest
import torch
from megatron.energon import (
    CaptioningSample,
    ImageClassificationSample,
    InterleavedSample,
    SkipSample,
    VQASample,
)
from megatron.energon.errors import FatalSampleError
from PIL import Image

import energon_plugins
from energon_plugins import BuildContext, ConfigError, MultiModalSampleConfig
from energon_plugins.encoding.chat.conversation import build_messages, tokenize_conversation
from energon_plugins.encoding.sample_config import ConversationTemplate
from energon_plugins.encoding.samples import EncodedSample
from energon_plugins.encoding.task_encoders.base import PluginTaskEncoder
from energon_plugins.errors import PluginOptionsError

IGNORE = -100


def read_png(info, key):
    """The PNG written for ``key``, read straight from the tar shards."""
    for shard in info.shards:
        with tarfile.open(shard) as tar:
            try:
                member = tar.getmember(f"{key}.png")
            except KeyError:
                continue
            return Image.open(io.BytesIO(tar.extractfile(member).read())).convert("RGB")
    raise KeyError(key)


def make_encoder(tokenizer, processor, *, seq_length=512, options=None, sample_config=None):
    ctx = BuildContext(
        tokenizer=tokenizer,
        image_processor=processor,
        sample_config=sample_config or MultiModalSampleConfig(),
        seq_length=seq_length,
    )
    return energon_plugins.create("task_encoder", "multimodal", options=options, context=ctx)


def to_tensor(img):
    return torch.from_numpy(__import__("numpy").asarray(img)).permute(2, 0, 1).float() / 255.0


def vqa(key, question, answer, img):
    return VQASample(
        __key__=key,
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        image=to_tensor(img),
        context=question,
        answers=[answer] if answer is not None else None,
    )


@pytest.fixture(scope="module")
def hf_proc(clip_processor):
    return energon_plugins.create("image_processor", "hf", {"class_name": type(clip_processor).__name__})


@pytest.fixture(scope="module")
def image_id(tokenizer):
    return tokenizer.convert_tokens_to_ids("<image>")


def test_vqa_batch_from_the_real_loader(vqa_dataset, tokenizer, clip_processor, image_id):
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(vqa_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=400,
        micro_batch_size=3,
        num_workers=0,
        batch_format=None,  # the task encoder's own batch
    )
    loader = dm.train_dataloader()
    for _ in range(3):
        batch = next(loader)
        assert batch.input_ids.shape == (3, 400) and batch.input_ids.dtype == torch.long
        assert batch.labels.shape == batch.loss_mask.shape == batch.position_ids.shape == (3, 400)
        assert batch.attention_mask.dtype == torch.bool
        assert torch.equal(batch.loss_mask.bool(), batch.labels != IGNORE)
        assert batch.packed_seq_params is None
        assert batch.pixel_values.shape == (3, 3, 224, 224)
        assert batch.num_images.tolist() == [1, 1, 1]
        for row, key in enumerate(batch.__key__):
            record = vqa_dataset.samples[key]
            ids, labels = batch.input_ids[row], batch.labels[row]
            real = int(batch.attention_mask[row].sum())
            assert torch.equal(batch.position_ids[row, :real], torch.arange(real))
            assert (ids[real:] == tokenizer.pad_token_id).all()
            # the answer, and nothing of the prompt, carries labels
            answer = tokenizer.decode(labels[labels != IGNORE], skip_special_tokens=True)
            assert answer.strip() == record["answers"][0]
            # one run of 256 image tokens (224 / 14 patches squared), all without labels
            where = (ids == image_id).nonzero().flatten()
            assert len(where) == 256 and int(where[-1] - where[0]) == 255
            assert (labels[where] == IGNORE).all()
            # prompt text decodes to the question
            assert record["context"] in tokenizer.decode(ids[:real])
            # pixel values equal the processor on the original PNG
            direct = clip_processor(images=[read_png(vqa_dataset, key)], return_tensors="pt")
            assert torch.allclose(batch.pixel_values[row], direct["pixel_values"][0], atol=1e-6)


def test_captioning_labels_are_the_caption(captioning_dataset, tokenizer, clip_processor, image_id):
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(captioning_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=400,
        micro_batch_size=2,
        num_workers=0,
        batch_format=None,
    )
    batch = next(dm.train_dataloader())
    for row, key in enumerate(batch.__key__):
        labels = batch.labels[row]
        caption = tokenizer.decode(labels[labels != IGNORE], skip_special_tokens=True)
        assert caption.strip() == captioning_dataset.samples[key]["caption"]
        assert int((batch.input_ids[row] == image_id).sum()) == 256


def test_interleaved_loss_on_all_text(interleaved_dataset, tokenizer, clip_processor, image_id):
    dm = energon_plugins.EnergonMultiModalDataModule(
        str(interleaved_dataset.path),
        tokenizer,
        clip_processor,
        seq_length=2048,
        micro_batch_size=1,
        num_workers=0,
        task_encoder={"name": "multimodal", "options": {"padding": "longest"}},
        batch_format=None,  # the task encoder's own batch
    )
    batch = next(dm.train_dataloader())
    ids, labels = batch.input_ids[0], batch.labels[0]
    n_images = int(batch.num_images[0])
    assert n_images >= 1
    assert int((ids == image_id).sum()) == 256 * n_images
    assert batch.pixel_values.shape[0] == n_images
    text = ids != image_id
    assert torch.equal(labels[text], ids[text]), "every text token is a target"
    assert (labels[~text] == IGNORE).all()
    assert batch.input_ids.shape[1] == len(ids)  # padding="longest": no pad tail


def test_image_position_follows_the_flag(tokenizer, hf_proc, image_id, vqa_dataset):
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    sample = vqa("k", "What color is the circle?", "red", img)
    after = make_encoder(tokenizer, hf_proc).encode_sample(sample)
    before = make_encoder(
        tokenizer, hf_proc, sample_config=MultiModalSampleConfig(image_following_text=False)
    ).encode_sample(sample)
    text_after = tokenizer.decode(after.input_ids)
    text_before = tokenizer.decode(before.input_ids)
    assert text_after.index("What color") < text_after.index("<image>")
    assert text_before.index("<image>") < text_before.index("What color")
    assert torch.equal(after.labels[after.labels != IGNORE], before.labels[before.labels != IGNORE])


def test_image_tokens_option_and_system_prompt(tokenizer, hf_proc, image_id, vqa_dataset):
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    config = MultiModalSampleConfig(
        conversation_template=ConversationTemplate(system_prompt="You are terse.")
    )
    enc = make_encoder(tokenizer, hf_proc, options={"image_tokens": 7}, sample_config=config)
    out = enc.encode_sample(vqa("k", "Which shape?", "a circle", img))
    assert isinstance(out, EncodedSample)
    assert int((out.input_ids == image_id).sum()) == 7
    assert "You are terse." in tokenizer.decode(out.input_ids)
    assert tokenizer.decode(out.labels[out.labels != IGNORE], skip_special_tokens=True).strip() == "a circle"
    assert out.seq_lengths == [out.length]


def test_truncation_never_cuts_inside_an_image(tokenizer, hf_proc, image_id, vqa_dataset):
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    sample = vqa("k", "What color is it?", "red and blue", img)
    full = make_encoder(tokenizer, hf_proc, options={"image_tokens": 20}).encode_sample(sample)
    run = (full.input_ids == image_id).nonzero().flatten()
    first_label = int((full.labels != IGNORE).nonzero()[0])
    # cut after the first answer token: the image is whole, the answer cut
    enc = make_encoder(tokenizer, hf_proc, seq_length=first_label + 1, options={"image_tokens": 20})
    cut = enc.encode_sample(sample)
    assert cut.truncated and cut.length == first_label + 1
    assert int((cut.input_ids == image_id).sum()) == 20
    # a cut inside the image run drops the whole run; no label is left, so the sample is skipped
    inside = int(run[0]) + 5
    enc = make_encoder(tokenizer, hf_proc, seq_length=inside, options={"image_tokens": 20})
    with pytest.raises(SkipSample):
        enc.encode_sample(sample)
    assert enc.error_counts() == {"truncated_no_labels": 1}
    # ... unless on_error is "raise": then the lost sample is an error naming it
    enc = make_encoder(
        tokenizer, hf_proc, seq_length=inside, options={"image_tokens": 20, "on_error": "raise"}
    )
    with pytest.raises(FatalSampleError, match=r"'k' \(truncated_no_labels\)"):
        enc.encode_sample(sample)
    # drop and error policies; "drop" is the user's choice, so it skips even under "raise"
    for on_error in ("skip", "raise"):
        enc = make_encoder(
            tokenizer,
            hf_proc,
            seq_length=inside,
            options={"image_tokens": 20, "truncation": "drop", "on_error": on_error},
        )
        with pytest.raises(SkipSample):
            enc.encode_sample(sample)
        assert enc.error_counts() == {"too_long": 1}
    enc = make_encoder(
        tokenizer, hf_proc, seq_length=inside, options={"image_tokens": 20, "truncation": "error"}
    )
    with pytest.raises(FatalSampleError, match="seq_length"):
        enc.encode_sample(sample)


def test_truncation_keeps_whole_images_only(tokenizer, hf_proc, image_id, vqa_dataset):
    img = to_tensor(read_png(vqa_dataset, vqa_dataset.split_keys["train"][0]))
    sample = InterleavedSample(
        __key__="il",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        sequence=["A red", img, "and then", img, "the end"],
    )
    full = make_encoder(tokenizer, hf_proc, options={"image_tokens": 10}).encode_sample(sample)
    assert full.num_images == 2 and full.pixel_values.shape[0] == 2
    second = (full.input_ids == image_id).nonzero().flatten()[10]
    enc = make_encoder(tokenizer, hf_proc, seq_length=int(second) + 4, options={"image_tokens": 10})
    cut = enc.encode_sample(sample)
    assert cut.length == int(second), "cut just before the second image's run"
    assert cut.num_images == 1 and cut.pixel_values.shape[0] == 1
    assert int((cut.input_ids == image_id).sum()) == 10


def test_tag_and_image_count_mismatch_is_counted(tokenizer, hf_proc, vqa_dataset):
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    sample = VQASample(
        __key__="two",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        image=to_tensor(img),
        context="<image> and <image>?",
        answers=["yes"],
    )
    enc = make_encoder(tokenizer, hf_proc, options={"image_tokens": 3})
    with pytest.raises(SkipSample):
        enc.encode_sample(sample)  # 2 tags, 1 image: counted as a ValueError
    assert enc.error_counts() == {"ValueError": 1}


def test_error_policy_skip_counts_and_raise_names_the_sample(tokenizer, hf_proc, vqa_dataset):
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    no_answer = vqa("no-answer-key", "Why?", None, img)
    enc = make_encoder(tokenizer, hf_proc)
    for _ in range(2):
        with pytest.raises(SkipSample):
            enc.encode_sample(no_answer)
    assert enc.error_counts() == {"ValueError": 2}
    enc = make_encoder(tokenizer, hf_proc, options={"on_error": "raise"})
    with pytest.raises(FatalSampleError, match="no-answer-key"):
        enc.encode_sample(no_answer)


def test_unsupported_sample_type_is_named(tokenizer, hf_proc):
    enc = make_encoder(tokenizer, hf_proc)
    other = ImageClassificationSample(
        __key__="t", __restore_key__=(), __subflavors__=None, __sources__=None, image=None, label=1
    )
    with pytest.raises(FatalSampleError, match="ImageClassificationSample"):
        enc.encode_sample(other)
    assert enc.error_counts() == {}


def test_tokenizer_without_the_image_token_is_a_clear_error(tokenizer, hf_proc):
    config = MultiModalSampleConfig(image_token="<img_not_there>")
    with pytest.raises(Exception, match="<img_not_there>") as info:
        make_encoder(tokenizer, hf_proc, sample_config=config)
    assert isinstance(info.value, ConfigError) or isinstance(info.value.__cause__, ConfigError)


def test_image_token_id_override_is_emitted(tokenizer, hf_proc, vqa_dataset):
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    config = MultiModalSampleConfig(image_token_id=9999)
    out = make_encoder(tokenizer, hf_proc, options={"image_tokens": 4}, sample_config=config).encode_sample(
        vqa("k", "Q?", "A", img)
    )
    assert int((out.input_ids == 9999).sum()) == 4
    assert int((out.input_ids == tokenizer.convert_tokens_to_ids("<image>")).sum()) == 0


def test_wrong_option_types_name_the_field(tokenizer, hf_proc):
    with pytest.raises(PluginOptionsError, match="image_tokens"):
        make_encoder(tokenizer, hf_proc, options={"image_tokens": "many"})
    with pytest.raises(PluginOptionsError, match="truncaton"):
        make_encoder(tokenizer, hf_proc, options={"truncaton": "right"})


def test_prefix_property_fallback_and_plain_rendering(tokenizer):
    # A template whose generation prompt ("[ASSISTANT]>>") is not what a rendered assistant
    # turn starts with: the prefix property fails, the answer is found by its text.
    odd = (
        "{% for m in messages %}[{{ m['role'] | upper }}]{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}[ASSISTANT]>>{% else %}<END>{% endif %}"
    )
    config = MultiModalSampleConfig(conversation_template=ConversationTemplate(chat_template=odd))
    messages = build_messages(config.conversation_template, [("user", "Q?"), ("assistant", "red circle")])
    ids, labels = tokenize_conversation(tokenizer, messages, config)
    assert len(ids) == len(labels)
    assert tokenizer.decode([t for t in labels if t != IGNORE]) == "red circle"

    class NoTemplate:
        """The same tokenizer seen without a chat template."""

        def __init__(self, inner):
            self._inner = inner
            self.chat_template = None
            self.is_fast = True

        def __call__(self, *a, **k):
            return self._inner(*a, **k)

    plain = MultiModalSampleConfig(
        conversation_template=ConversationTemplate(chat_template="plain", stop_string="<|im_end|>")
    )
    messages = build_messages(plain.conversation_template, [("user", "Q?"), ("assistant", "blue")])
    ids, labels = tokenize_conversation(NoTemplate(tokenizer), messages, plain)
    assert tokenizer.decode(ids) == "user: Q?\nassistant: blue<|im_end|>\n"
    assert tokenizer.decode([t for t in labels if t != IGNORE]) == "blue<|im_end|>"

    # Without a stop string the answer ends with the tokenizer's eos token, labelled.
    bare = MultiModalSampleConfig(conversation_template=ConversationTemplate(chat_template="plain"))
    no_template = NoTemplate(tokenizer)
    no_template.eos_token = tokenizer.eos_token
    messages = build_messages(bare.conversation_template, [("user", "Q?"), ("assistant", "blue")])
    ids, labels = tokenize_conversation(no_template, messages, bare)
    assert [t for t in labels if t != IGNORE][-1] == tokenizer.eos_token_id
    assert tokenizer.decode([t for t in labels if t != IGNORE]) == "blue" + tokenizer.eos_token
    # Neither a stop string nor an eos token: refused, naming the setting.
    no_template.eos_token = None
    with pytest.raises(ConfigError, match="conversation_template.stop_string"):
        tokenize_conversation(no_template, messages, bare)


class _Pairs(PluginTaskEncoder):
    """A tiny plugin encoder used to test the base class on its own."""

    def encode_sample(self, sample):
        if sample.caption == "bad":
            raise KeyError("broken")
        ids = torch.tensor([5, 6, 7][: len(sample.caption)])
        return EncodedSample.derive_from(
            sample, input_ids=ids, labels=ids.clone(), loss_mask=torch.ones(len(ids))
        )


def _cap(key, caption):
    return CaptioningSample(
        __key__=key,
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        image=torch.zeros(3, 2, 2),
        caption=caption,
    )


def test_base_wraps_subclass_encode_sample_with_the_policy(tokenizer):
    enc = _Pairs(BuildContext(tokenizer=tokenizer, seq_length=8))
    assert getattr(type(enc).encode_sample, "__stateless__", False)
    with pytest.raises(SkipSample):
        enc.encode_sample(_cap("x", "bad"))
    assert enc.error_counts() == {"KeyError": 1}
    out = enc.encode_sample(_cap("y", "ab"))
    assert out.input_ids.tolist() == [5, 6]


def test_batch_of_packed_and_plain_rows(tokenizer):
    enc = _Pairs(BuildContext(tokenizer=tokenizer, seq_length=8))
    a = EncodedSample.derive_from(
        _cap("a", ""),
        input_ids=torch.arange(1, 6),
        labels=torch.arange(1, 6),
        loss_mask=torch.ones(5),
        seq_lengths=[3, 2],
    )
    b = EncodedSample.derive_from(
        _cap("b", ""),
        input_ids=torch.arange(1, 5),
        labels=torch.arange(1, 5),
        loss_mask=torch.ones(4),
        seq_lengths=[4],
    )
    batch = enc.batch([a, b])
    assert batch.input_ids.shape == (2, 8)
    assert batch.position_ids[0].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert batch.position_ids[1, :4].tolist() == [0, 1, 2, 3]
    assert batch.attention_mask is None
    psp = batch.packed_seq_params
    assert psp.qkv_format == "thd"
    assert psp.cu_seqlens_q.tolist() == [0, 3, 5, 8, 12, 16]
    assert psp.max_seqlen_q == 4 and psp.cu_seqlens_q.dtype == torch.int32
    assert batch.labels[0, 5:].tolist() == [IGNORE] * 3
    assert batch.loss_mask[1].tolist() == [1.0] * 4 + [0.0] * 4
    assert batch.__key__ == ["a", "b"]
    plain = enc.batch([b])
    assert plain.packed_seq_params is None and plain.attention_mask[0].tolist() == [True] * 4 + [False] * 4


def test_grid_processor_sets_tokens_from_image_grid_thw(tokenizer, image_id, vqa_dataset):
    proc = energon_plugins.create("image_processor", "hf", {"class_name": "Qwen2VLImageProcessorPil"})
    img = to_tensor(read_png(vqa_dataset, vqa_dataset.split_keys["train"][0]))
    enc = make_encoder(tokenizer, proc)
    sample = InterleavedSample(
        __key__="q",
        __restore_key__=(),
        __subflavors__=None,
        __sources__=None,
        sequence=["first", img, "second", img, "end"],
    )
    out = enc.encode_sample(sample)
    grid = out.image_grid_thw
    per_image = [int(t * h * w) // 4 for t, h, w in grid.tolist()]  # Qwen2-VL merges 2x2 patches
    assert grid.shape == (2, 3) and out.pixel_values.shape[0] == int(grid.prod(dim=-1).sum())
    assert int((out.input_ids == image_id).sum()) == sum(per_image)
    # a cut inside the second run keeps the first image's patches and grid only
    second_start = int((out.input_ids == image_id).nonzero().flatten()[per_image[0]])
    cut = make_encoder(tokenizer, proc, seq_length=second_start + 1).encode_sample(sample)
    assert cut.num_images == 1 and cut.image_grid_thw.tolist() == grid[:1].tolist()
    assert cut.pixel_values.shape[0] == int(grid[0].prod())
    assert torch.equal(cut.pixel_values, out.pixel_values[: int(grid[0].prod())])
    batch = enc.batch([out, cut])
    assert batch.image_grid_thw.shape == (3, 3) and batch.num_images.tolist() == [2, 1]
    assert batch.pixel_values.shape[0] == out.pixel_values.shape[0] + cut.pixel_values.shape[0]


@pytest.mark.parametrize("family", ["generic", "llava", "qwen2"])
def test_prompt_tokens_are_what_the_model_sees_at_inference(family, hf_proc, vqa_dataset):
    from energon_plugins.synthetic import build_demo_tokenizer

    tok = build_demo_tokenizer(family)
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    enc = make_encoder(tok, hf_proc, options={"image_tokens": 1})
    out = enc.encode_sample(vqa("k", "What shape is it?", "a green triangle", img))
    labelled = (out.labels != IGNORE).nonzero().flatten()
    first = int(labelled[0])
    assert tok.decode(out.labels[labelled], skip_special_tokens=True).strip() == "a green triangle"
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What shape is it?\n<image>"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert out.input_ids[:first].tolist() == tok(prompt, add_special_tokens=False)["input_ids"]
    assert int(labelled[-1]) - first + 1 == len(labelled), "one contiguous answer span"


def test_a_subclass_calling_super_counts_each_skip_once(tokenizer, hf_proc, vqa_dataset):
    from energon_plugins.encoding.task_encoders.multimodal import MultimodalTaskEncoder
    from energon_plugins.encoding.task_encoders.options import MultimodalOptions

    class Upper(MultimodalTaskEncoder):
        def encode_sample(self, sample):
            sample.context = sample.context.upper()
            return super().encode_sample(sample)

    ctx = BuildContext(tokenizer=tokenizer, image_processor=hf_proc, seq_length=512)
    enc = Upper(ctx, MultimodalOptions(image_tokens=2))
    img = read_png(vqa_dataset, vqa_dataset.split_keys["train"][0])
    with pytest.raises(SkipSample):
        enc.encode_sample(vqa("k", "why?", None, img))
    assert enc.error_counts() == {"ValueError": 1}
    out = enc.encode_sample(vqa("k2", "why?", "because", img))
    assert "WHY?" in tokenizer.decode(out.input_ids)


def test_gpt_turns_maps_roles_and_names_bad_turns():
    from energon_plugins.encoding.chat.conversation import gpt_turns

    turns = [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": "A."}]
    assert gpt_turns(turns, "k") == [("user", "Q?"), ("assistant", "A.")]
    with pytest.raises(ValueError, match=r"sample 'k': conversations\[1\]\.from is 'bot'"):
        gpt_turns([turns[0], {"from": "bot", "value": "x"}], "k")
    with pytest.raises(ValueError, match=r"conversations\[0\]\.value is not a string"):
        gpt_turns([{"from": "gpt", "value": 3}], "k")


def test_a_subclass_failing_after_super_still_counts_consecutive_errors(tokenizer, hf_proc, vqa_dataset):
    """The parent's successful (wrapped) encode_sample must not reset the count of samples the
    subclass fails on, or a loader whose every sample fails would spin forever."""
    from energon_plugins.encoding.task_encoders.multimodal import MultimodalTaskEncoder
    from energon_plugins.encoding.task_encoders.options import MultimodalOptions

    class FailsAfterSuper(MultimodalTaskEncoder):
        def encode_sample(self, sample):
            super().encode_sample(sample)
            raise ValueError("post-processing failed")

    ctx = BuildContext(tokenizer=tokenizer, image_processor=hf_proc, seq_length=512)
    enc = FailsAfterSuper(ctx, MultimodalOptions(image_tokens=4))
    assert FailsAfterSuper.defer_images is False  # it may read pixel values: nothing deferred
    enc.max_consecutive_errors = 3
    sample = vqa("k", "What?", "A shape.", read_png(vqa_dataset, vqa_dataset.split_keys["train"][0]))
    for _ in range(2):
        with pytest.raises(SkipSample):
            enc.encode_sample(sample)
    with pytest.raises(FatalSampleError, match="3 samples in a row"):
        enc.encode_sample(sample)
