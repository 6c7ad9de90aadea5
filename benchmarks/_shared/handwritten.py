"""The pipeline a user writes by hand without energon-plugins: the benchmarks' baseline.

Energon's own loader (``get_train_dataset`` + ``get_savable_loader``), images decoded by
Energon as PIL images (``SampleDecoder(image_decode="pil")``, what Energon's documentation
suggests for Hugging Face processors), transformers' image processor with its default
(torchvision) backend called on each sample, and the tokenizer's chat template with
``tokenizer(...)`` calls: the prompt is rendered with the generation prompt and tokenized,
the rest of the conversation (the answer) tokenized after it and labelled, and the image
placeholder expanded to as many image tokens as the processor's output implies. Same prompts
and same outputs as the project's ``llava`` and ``qwen2-vl`` encoders (the benchmark checks
that the token ids are identical and reports the largest pixel difference).
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.energon import Batch, DefaultTaskEncoder, Sample, SampleDecoder, edataclass, stateless

IGNORE = -100
LLAVA_SYSTEM = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
QWEN_VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@edataclass
class HandSample(Sample):
    """One encoded sample."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor | None


@edataclass
class HandBatch(Batch):
    """A padded batch."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    loss_mask: torch.Tensor
    attention_mask: torch.Tensor
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor | None


class HandWrittenEncoder(DefaultTaskEncoder):
    """VQA samples to LLaVA-1.5 or Qwen2-VL training batches, written plainly."""

    decoder = SampleDecoder(image_decode="pil")

    def __init__(
        self, tokenizer: Any, image_processor: Any, family: str, seq_length: int, patch_size: int = 14
    ) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.family = family
        self.seq_length = seq_length
        self.patch_size = patch_size
        image_token = "<image>" if family == "llava" else "<|image_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(image_token)
        self.pad_id = tokenizer.pad_token_id

    def _messages(self, question: str, answer: str) -> list[dict[str, str]]:
        if self.family == "llava":
            return [
                {"role": "system", "content": LLAVA_SYSTEM},
                {"role": "user", "content": f"<image>\n{question}"},
                {"role": "assistant", "content": answer},
            ]
        return [
            {"role": "user", "content": f"{QWEN_VISION}\n{question}"},
            {"role": "assistant", "content": answer},
        ]

    def _image_tokens(self, processed: Any) -> int:
        if self.family == "llava":
            height, width = processed["pixel_values"].shape[-2:]
            return (height // self.patch_size) * (width // self.patch_size)
        merge = self.image_processor.merge_size
        return int(processed["image_grid_thw"][0].prod()) // (merge * merge)

    @stateless
    def encode_sample(self, sample: Any) -> HandSample:
        tok = self.tokenizer
        messages = self._messages(sample.context, sample.answers[0])
        prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(messages, tokenize=False)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tok(full[len(prompt) :], add_special_tokens=False)["input_ids"]
        processed = self.image_processor(images=[sample.image], return_tensors="pt")
        n = self._image_tokens(processed)
        at = prompt_ids.index(self.image_token_id)
        prompt_ids = prompt_ids[:at] + [self.image_token_id] * n + prompt_ids[at + 1 :]
        ids = (prompt_ids + answer_ids)[: self.seq_length]
        labels = ([IGNORE] * len(prompt_ids) + answer_ids)[: self.seq_length]
        return HandSample.derive_from(
            sample,
            input_ids=torch.tensor(ids),
            labels=torch.tensor(labels),
            pixel_values=processed["pixel_values"],
            image_grid_thw=processed.get("image_grid_thw"),
        )

    @stateless
    def batch(self, samples: list[HandSample]) -> HandBatch:
        size = (len(samples), self.seq_length)
        input_ids = torch.full(size, self.pad_id, dtype=torch.long)
        labels = torch.full(size, IGNORE, dtype=torch.long)
        attention_mask = torch.zeros(size, dtype=torch.bool)
        for row, s in enumerate(samples):
            n = len(s.input_ids)
            input_ids[row, :n] = s.input_ids
            labels[row, :n] = s.labels
            attention_mask[row, :n] = True
        grids = [s.image_grid_thw for s in samples if s.image_grid_thw is not None]
        return HandBatch.from_samples(
            samples,
            input_ids=input_ids,
            labels=labels,
            loss_mask=(labels != IGNORE).float(),
            attention_mask=attention_mask,
            pixel_values=torch.cat([s.pixel_values for s in samples]),
            image_grid_thw=torch.cat(grids) if grids else None,
        )


def hand_written_loader(
    path: str,
    family: str,
    tokenizer_dir: str,
    *,
    workers: int,
    micro_batch_size: int,
    seq_length: int,
    shuffle_buffer_size: int,
    processor_kwargs: dict[str, Any] | None = None,
) -> Any:
    """The hand-written pipeline's savable loader (transformers' default image backend)."""
    import transformers
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    cls = transformers.CLIPImageProcessor if family == "llava" else transformers.Qwen2VLImageProcessor
    processor = cls(**(processor_kwargs or {}))
    encoder = HandWrittenEncoder(tokenizer, processor, family, seq_length)
    dataset = get_train_dataset(
        path,
        split_part="train",
        batch_size=micro_batch_size,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=None,
        task_encoder=encoder,
        worker_config=WorkerConfig.default_worker_config(workers),
    )
    return get_savable_loader(dataset)
