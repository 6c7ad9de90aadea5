"""Templates of a task-encoder plugin: VQA samples as image tokens, a prompt and an answer."""

KIND_TEXT = "task encoder"
MODULE = "encoder"
MODULE_TEXT = (
    "the task encoder, a `PluginTaskEncoder` subclass whose `encode_sample` turns a "
    "`VQASample` into an `EncodedSample` (the base class batches, pads and packs)."
)
FACTORY = "build_task_encoder"
CHECK = "check_task_encoder"
CONFIG_INTRO = "Select it as the task encoder of a datamodule config:"
CONFIG_EXAMPLE = """\
path: /data/my-vqa-dataset          # an Energon dataset of VQASample
seq_length: 1024
micro_batch_size: 4
tokenizer: {path: /models/my-tokenizer}
image_processor: {name: hf}
task_encoder:
  name: ${name}
  options:
    prompt_template: "Question: {question}\\nAnswer:"
    patch_size: 14"""
OPTIONS_TABLE = """\
| option | default | meaning |
| --- | --- | --- |
| `prompt_template` | `"Question: {question}\\nAnswer:"` | the text before the answer; `{question}` is the sample's question |
| `image_tokens` | `null` | image tokens per image; `null` derives them from the pixel values (`H/patch * W/patch`) |
| `patch_size` | `14` | the vision encoder's patch size |
| `on_error` | `skip` | a sample that fails to encode is skipped and counted (`skip`) or stops the loader (`raise`) |"""

OPTIONS = '''\
"""Options of the ``${name}`` task encoder (import-light: pydantic only)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ${class_name}Options(BaseModel):
    """Options of the ``${name}`` task encoder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_template: str = Field(
        default="Question: {question}\\nAnswer:",
        description="The text before the answer; {question} is replaced by the question.",
    )
    image_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Image tokens per image; None derives them from the pixel values "
        "(H/patch_size * W/patch_size).",
    )
    patch_size: int = Field(default=14, ge=1, description="The vision encoder's patch size.")
    on_error: Literal["skip", "raise"] = Field(
        default="skip",
        description="A sample that fails to encode is skipped and counted, or raises.",
    )
'''


COMPONENT = '''\
"""The ``${name}`` task encoder: a VQA sample becomes image tokens, a prompt and an answer.

Only the answer carries labels; everything else is the ignore index. The base class
(``PluginTaskEncoder``) batches, pads to ``seq_length``, packs when a packing strategy is
selected, and applies the error policy; everything it runs is ``@stateless``, and so must
``encode_sample`` be: a pure function of the sample (Energon re-runs it when it restores a
saved loader state).
"""

import torch
from megatron.energon import VQASample, stateless

from energon_plugins import BuildContext, EncodedSample, PluginTaskEncoder
from energon_plugins.encoding.task_encoders.base import CountedSkip
from energon_plugins.encoding.chat.conversation import vqa_answer

from ${package}.options import ${class_name}Options


class ${class_name}TaskEncoder(PluginTaskEncoder[VQASample]):
    """Encode ``VQASample``: ``<image>`` x N, the prompt, then the answer and EOS."""

    def __init__(self, context: BuildContext, options: ${class_name}Options | None = None) -> None:
        options = options if options is not None else ${class_name}Options()
        super().__init__(context, on_error=options.on_error)
        self.options = options
        if self.tokenizer is None or self.image_processor is None:
            raise ValueError("${name}: the build context needs a tokenizer and an image_processor")
        token = self.sample_config.image_token
        image_id = self.sample_config.image_token_id
        if image_id is None:
            image_id = self.tokenizer.convert_tokens_to_ids(token)
        if not isinstance(image_id, int) or image_id == self.tokenizer.unk_token_id:
            raise ValueError(f"${name}: the tokenizer has no token {token!r}")
        self.image_token_id = image_id

    def image_token_count(self, pixel_values: torch.Tensor) -> int:
        """Image tokens for one image: the option, or (H / patch) * (W / patch)."""
        if self.options.image_tokens is not None:
            return self.options.image_tokens
        patch = self.options.patch_size
        return (pixel_values.shape[-2] // patch) * (pixel_values.shape[-1] // patch)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @stateless
    def encode_sample(self, sample: VQASample) -> EncodedSample:
        """Encode one VQA sample; a sample whose answer does not fit is skipped and counted."""
        answer = vqa_answer(sample)  # the first answer; a plain string is one answer
        pixel_values = self.image_processor(images=[sample.image], return_tensors="pt")[
            "pixel_values"
        ]
        pixel_values = torch.as_tensor(pixel_values)
        image_ids = [self.image_token_id] * self.image_token_count(pixel_values)
        prompt_ids = self._ids(self.options.prompt_template.format(question=sample.context))
        answer_ids = self._ids(" " + answer)
        eos = self.tokenizer.eos_token_id
        if isinstance(eos, int):
            answer_ids.append(eos)
        ignore = self.ignore_index
        ids = image_ids + prompt_ids + answer_ids
        labels = [ignore] * (len(image_ids) + len(prompt_ids)) + answer_ids
        ids, labels = ids[: self.seq_length], labels[: self.seq_length]
        if all(label == ignore for label in labels):
            raise CountedSkip("too_long", f"sample {sample.__key__!r}: no answer token fits")
        input_ids = torch.tensor(ids, dtype=torch.long)
        label_t = torch.tensor(labels, dtype=torch.long)
        return EncodedSample.derive_from(
            sample,
            input_ids=input_ids,
            labels=label_t,
            loss_mask=(label_t != ignore).to(torch.float32),
            pixel_values=pixel_values,
            num_images=1,
            seq_lengths=[len(ids)],
            truncated=len(image_ids) + len(prompt_ids) + len(answer_ids) > self.seq_length,
        )


def build_task_encoder(
    options: ${class_name}Options | None, context: BuildContext
) -> ${class_name}TaskEncoder:
    """Factory of ``${name}`` (``factory(options, context)``)."""
    return ${class_name}TaskEncoder(context, options)
'''

TESTS = '''\
"""Tests of ${distribution}: the energon-plugins conformance check, then its own behaviour.

The fixtures (energon_dataset, build_context) come from energon-plugins' pytest plugin.
"""

import energon_plugins
from energon_plugins.testing import check_task_encoder


def test_conforms_to_the_task_encoder_contract():
    # registration, options, stateless methods, batch shapes, labels, exact resume,
    # on a real VQA dataset read through Energon's loader
    check_task_encoder("${name}")


def test_only_the_answer_carries_labels(energon_dataset, build_context):
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    info = energon_dataset("vqa", num_samples=20)
    context = build_context()
    encoder = energon_plugins.create("task_encoder", "${name}", context=context)
    dataset = get_val_dataset(
        str(info.path), batch_size=None,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
    )
    seen = 0
    for sample in get_loader(dataset):
        encoded = encoder.encode_sample(sample)
        labelled = encoded.labels[encoded.labels != encoder.ignore_index]
        answer = context.tokenizer.decode(labelled, skip_special_tokens=True).strip()
        assert answer == info.samples[sample.__key__]["answers"][0]
        # 224 px CLIP pixels, 14 px patches: 16 x 16 image tokens, none of them labelled
        image = encoded.input_ids == encoder.image_token_id
        assert int(image.sum()) == 256 and bool((encoded.labels[image] == -100).all())
        seen += 1
    assert seen == len(info.split_keys["val"])
'''
