"""The built-in ``multimodal`` task encoder: VQA, captioning, interleaved and conversations.

Each sample becomes chat messages (system prompt, user turn with the image tag, assistant
answer; or the turns of a crude ``chatml`` conversation, what ``energon-plugins convert``
writes), rendered with the tokenizer's chat template; only the answer tokens carry labels.
Every image tag is expanded to as many image tokens as the image processor yields embeddings
for that image. Samples are cut to ``seq_length`` (never inside an image) or dropped, per the
``truncation`` option.

In the loader, when the image processor can tell an image's output size or patch grid from
the image's size alone (``output_size_for`` / ``grid_for``), the encoding stage reads only the
image headers and returns a :class:`~energon_plugins.encoding.samples.PendingImagesSample` with
exact lengths; :meth:`MultimodalTaskEncoder.complete_samples` processes the pixels of a whole
pack (after the packing stage has chosen it) or batch in one processor call, into one tensor.
The shuffle and packing buffers then hold no pixel tensors and fill from cheap work, and no
copy concatenates the samples' pixels. ``encode_sample`` called directly still returns
finished samples.
"""

import inspect
from typing import Any

import numpy as np
import torch
from megatron.energon import CaptioningSample, InterleavedSample, VQASample, stateless
from megatron.energon.errors import FatalSampleError
from megatron.energon.task_encoder.base import get_failure_tolerance

from energon_plugins.host.context import BuildContext
from energon_plugins.errors import ConfigError
from energon_plugins.encoding.chatml import ChatMLSample, conversation_cookers, text_turns
from energon_plugins.encoding.image_processors.inputs import image_size
from energon_plugins.encoding.samples import EncodedSample, PendingImagesSample
from energon_plugins.encoding.task_encoders.base import CountedSkip, PluginTaskEncoder
from energon_plugins.encoding.task_encoders.conversation import (
    build_messages,
    end_of_turn,
    expand_image_tokens,
    resolve_image_token_ids,
    tokenize_conversation,
    tokenize_texts,
    uses_plain_rendering,
    vqa_answer,
)
from energon_plugins.encoding.task_encoders.options import MultimodalOptions

SUPPORTED = (VQASample, CaptioningSample, InterleavedSample, ChatMLSample)


class UnsupportedSampleError(FatalSampleError):
    """The dataset yields a sample type this encoder cannot encode (a setup error)."""


class MultimodalTaskEncoder(PluginTaskEncoder[Any]):
    """Encode ``VQASample``, ``CaptioningSample``, ``InterleavedSample`` and crude ``chatml``.

    Args:
        context: the build context; needs a tokenizer (knowing the image tag as one token)
            and an image processor.
        options: :class:`MultimodalOptions`.
    """

    supported_sample_types = SUPPORTED
    cookers = conversation_cookers()
    defer_images = True
    """In the loader, leave image pixels to :meth:`complete_samples` when the lengths are known
    from the image sizes. A subclass that overrides ``encode_sample`` gets ``False`` (its code
    may read ``pixel_values``) unless its class body sets it: set ``defer_images = True`` when
    its ``encode_sample`` returns what :meth:`finish_sample` built without touching the pixels."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "encode_sample" in cls.__dict__ and "defer_images" not in cls.__dict__:
            cls.defer_images = False

    def __init__(self, context: BuildContext, options: MultimodalOptions | None = None) -> None:
        options = options if options is not None else MultimodalOptions()
        super().__init__(context, on_error=options.on_error, padding=options.padding)
        self.options = options
        if self.tokenizer is None:
            raise ConfigError("multimodal task encoder: the build context has no tokenizer")
        if self.image_processor is None:
            raise ConfigError(
                "image_processor: the multimodal task encoder needs an image processor, but none "
                "was given; pass image_processor=... to EnergonMultiModalDataModule (a "
                "transformers image processor works), or select a task encoder that brings its "
                "own (such as hf-processor)"
            )
        self.image_text_id, self.image_token_id = resolve_image_token_ids(
            self.tokenizer, self.sample_config
        )
        template = self.sample_config.conversation_template
        if uses_plain_rendering(self.tokenizer, template):
            end_of_turn(self.tokenizer, template)  # refused now, not on every sample
        self._deferring = False

    # ------------------------------------------------------------------ the loader's stage
    def build_encode_sample(self, dataset: Any, *, worker_config: Any) -> Any:
        """Energon's encoding stage, running :meth:`encode_sample_deferring` in the loader."""
        if not self.defer_images or self._is_overridden(self.preencode_sample) or (
            inspect.isgeneratorfunction(inspect.unwrap(type(self).encode_sample))
        ):
            return super().build_encode_sample(dataset, worker_config=worker_config)
        from megatron.energon.wrappers import MapDataset

        return MapDataset(
            dataset,
            self.encode_sample_deferring,
            worker_config=worker_config,
            stateless_map_fn=True,
            failure_tolerance=get_failure_tolerance(
                self.encode_sample, self.__default_failure_tolerance__
            ),
        )

    @stateless
    def encode_sample_deferring(self, sample: Any) -> EncodedSample:
        """:meth:`encode_sample` with image pixels left to :meth:`complete_samples` when the
        lengths are known from the image sizes (the loader's encoding stage)."""
        self._deferring = True
        try:
            return self.encode_sample(sample)
        finally:
            self._deferring = False

    # ------------------------------------------------------------------ dispatch
    @stateless
    def encode_sample(self, sample: Any) -> EncodedSample:
        """Encode one Energon sample (dispatching on its type) to an :class:`EncodedSample`."""
        if isinstance(sample, VQASample):
            return self._encode_chat(sample, sample.context, vqa_answer(sample), [sample.image])
        if isinstance(sample, CaptioningSample):
            return self._encode_chat(
                sample, self.options.caption_prompt, sample.caption, [sample.image]
            )
        if isinstance(sample, InterleavedSample):
            return self._encode_interleaved(sample)
        if isinstance(sample, ChatMLSample):
            return self._encode_conversation(sample)
        raise UnsupportedSampleError(
            f"the multimodal task encoder cannot encode {type(sample).__name__} samples "
            f"(key {getattr(sample, '__key__', None)!r}); it handles "
            f"{', '.join(t.__name__ for t in SUPPORTED)}. Use a task encoder plugin for this "
            "sample type."
        )

    # ------------------------------------------------------------------ sample kinds
    def user_text(self, text: str, num_images: int) -> str:
        """The user turn's text with one image tag per image (where the text has none)."""
        tag = self.sample_config.image_token
        if tag in text or num_images == 0:
            return text
        tags = "\n".join([tag] * num_images)
        if not text:
            return tags
        if self.sample_config.image_following_text:
            return f"{text}\n{tags}"
        return f"{tags}\n{text}"

    def _encode_chat(
        self, sample: Any, question: str, answer: str, images: list[torch.Tensor]
    ) -> EncodedSample:
        messages = build_messages(
            self.sample_config.conversation_template,
            [("user", self.user_text(question, len(images))), ("assistant", answer)],
        )
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        return self.finish_sample(sample, ids, labels, images)

    def _encode_conversation(self, sample: ChatMLSample) -> EncodedSample:
        """Every turn of a cooked conversation; its image tags already mark the images."""
        messages = build_messages(self.sample_config.conversation_template, text_turns(sample))
        ids, labels = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        return self.finish_sample(sample, ids, labels, list(sample.images))

    def _encode_interleaved(self, sample: InterleavedSample) -> EncodedSample:
        images: list[torch.Tensor] = []
        texts: list[str] = []
        for item in sample.sequence:
            if isinstance(item, str):
                texts.append(item)
            elif _is_image(item):
                images.append(item)
            else:
                raise TypeError(
                    f"InterleavedSample {sample.__key__!r}: sequence item of type "
                    f"{type(item).__name__} (expected str or an image)"
                )
        pieces = iter(tokenize_texts(self.tokenizer, texts))
        ids: list[int] = []
        labels: list[int] = []
        ignore = self.ignore_index
        for item in sample.sequence:
            if isinstance(item, str):
                piece = next(pieces)
                ids += piece
                labels += piece
            else:
                ids.append(self.image_text_id)
                labels.append(ignore)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
            labels.append(eos)
        return self.finish_sample(sample, ids, labels, images)

    # ------------------------------------------------------------------ set-up checks
    #: The image ``preflight_problems`` sends through the image processor (width, height).
    PREFLIGHT_IMAGE_SIZE = (224, 224)

    def preflight_problems(self) -> list[str]:
        """Problems found without data: ``seq_length`` shorter than the shortest sample with
        one image (its image tokens plus the chat template around a one-word question and
        answer). Each message starts with the key it concerns."""
        width, height = self.PREFLIGHT_IMAGE_SIZE
        image = torch.full((3, height, width), 0.5)
        messages = build_messages(
            self.sample_config.conversation_template,
            [("user", self.user_text("?", 1)), ("assistant", "a")],
        )
        ids, _ = tokenize_conversation(self.tokenizer, messages, self.sample_config)
        processed, _ = self.process_images([image])
        [tokens] = self.image_token_counts(processed, 1)
        total = len(ids) - 1 + tokens
        if total <= self.seq_length:
            return []
        return [
            f"seq_length: {self.seq_length} is too small for one image: the image processor "
            f"gives {tokens} image tokens for a {width}x{height} image and the chat template "
            f"with a one-word question and answer {len(ids) - 1} more ({total} in all); every "
            "sample with an image would be cut or skipped"
        ]

    # ------------------------------------------------------------------ images and length
    def image_token_counts(self, processed: Any, num_images: int) -> list[int]:
        """Image embeddings per image implied by the processor output (or the option)."""
        if num_images == 0:
            return []
        if self.options.image_tokens is not None:
            return [self.options.image_tokens] * num_images
        grid = _get(processed, "image_grid_thw")
        if grid is not None:
            merge = self.options.merge_size or int(
                getattr(self.image_processor, "merge_size", None) or 1
            )
            counts = [int(t * h * w) // (merge * merge) for t, h, w in grid.tolist()]
        else:
            pixels = _get(processed, "pixel_values")
            if pixels is None or pixels.dim() != 4:
                raise ValueError(
                    "cannot derive image tokens: the image processor returned no image_grid_thw "
                    "and pixel_values is not (N, C, H, W); set the image_tokens option"
                )
            patch = self.options.patch_size
            height, width = int(pixels.shape[-2]), int(pixels.shape[-1])
            counts = [(height // patch) * (width // patch)] * int(pixels.shape[0])
        if len(counts) != num_images:
            raise ValueError(
                f"the image processor returned {len(counts)} images for {num_images} inputs"
            )
        return counts

    def plan_images(self, images: list[Any]) -> tuple[list[int], torch.Tensor | None] | None:
        """Token counts (and grids) of ``images`` from their sizes alone; None if unknowable.

        Reads each image's size (an encoded image's header only) and asks the processor for
        the patch grid (``grid_for(height, width)``) or the output size
        (``output_size_for(height, width)``); the counts then come from
        :meth:`image_token_counts` as they would from the processed output.
        """
        if not images:
            return [], None
        proc = self.image_processor
        grid_for = getattr(proc, "grid_for", None)
        size_for = getattr(proc, "output_size_for", None)
        if not callable(grid_for) and not callable(size_for):
            return None
        sizes = [image_size(img) for img in images]
        if callable(grid_for):
            grids = [grid_for(h, w) for h, w in sizes]
            if all(g is not None for g in grids):
                grid = torch.tensor(grids, dtype=torch.long)
                return self.image_token_counts({"image_grid_thw": grid}, len(images)), grid
        if callable(size_for):
            outputs = [size_for(h, w) for h, w in sizes]
            if all(o is not None for o in outputs):
                counts = []
                for height, width in outputs:  # shapes only: meta tensors hold no memory
                    pixels = torch.empty((1, 3, height, width), device="meta")
                    counts += self.image_token_counts({"pixel_values": pixels}, 1)
                return counts, None
        return None

    def _defer_images(self) -> bool:
        """Whether to leave the pixels to :meth:`complete_samples`: in the loader's stage."""
        return self._deferring

    def complete_samples(
        self, samples: list[EncodedSample]
    ) -> tuple[list[EncodedSample], torch.Tensor | None]:
        """Process the pending images of the :class:`PendingImagesSample` among ``samples``.

        All their images go through the processor in one call, in order; each finished
        sample's ``pixel_values`` is a view into the result, which is returned too when every
        sample with images was pending (else ``None``: the caller concatenates). The output
        must give the token counts (and grids) planned from the image sizes; a difference stops
        the loader, naming the sample (the plan was wrong).
        """
        pending = [s for s in samples if isinstance(s, PendingImagesSample) and s.pending_images]
        if not pending:
            return samples, None
        images = [img for s in pending for img in s.pending_images]
        processed, pixels = self.process_images(images)
        grid = _get(processed, "image_grid_thw")
        counts = self.image_token_counts(processed, len(images))
        done: dict[int, EncodedSample] = {}
        image = row = 0
        for sample in pending:
            n = len(sample.pending_images)
            own_grid = grid[image : image + n] if grid is not None else None
            rows = int(own_grid.prod(dim=-1).sum()) if own_grid is not None else n
            self._check_plan(sample, counts[image : image + n], own_grid)
            done[id(sample)] = _finished(sample, pixels[row : row + rows], own_grid)
            image, row = image + n, row + rows
        out = [done.get(id(s), s) for s in samples]
        all_pending = all(
            id(s) in done or s.pixel_values is None for s in samples
        ) and row == int(pixels.shape[0])
        return out, pixels if all_pending else None

    def _check_plan(self, sample: Any, counts: list[int], grid: torch.Tensor | None) -> None:
        planned = sample.image_grid_thw
        if counts != list(sample.image_token_counts or []) or (
            planned is not None and (grid is None or not torch.equal(grid.to(planned.dtype), planned))
        ):
            raise FatalSampleError(
                f"sample {sample.__key__!r}: the image processor's output gives image tokens "
                f"{counts} (grids {None if grid is None else grid.tolist()}), but the sizes "
                f"planned {sample.image_token_counts} (grids "
                f"{None if planned is None else planned.tolist()})"
            )

    def process_images(self, images: list[torch.Tensor]) -> tuple[Any, Any]:
        """``(processor output, pixel values)`` of ``images`` (``(None, None)`` without images)."""
        if not images:
            return None, None
        out = self.image_processor(images=images, return_tensors="pt")
        pixels = _get(out, "pixel_values")
        if pixels is None:
            raise ValueError(
                f"image processor {type(self.image_processor).__name__} returned no pixel_values"
            )
        return out, torch.as_tensor(pixels)

    def finish_sample(
        self, sample: Any, ids: list[int], labels: list[int], images: list[torch.Tensor],
        processed: tuple[Any, Any] | None = None,
    ) -> EncodedSample:
        """Process ``images``, expand their tags, truncate to ``seq_length``, build the sample.

        ``ids``/``labels`` hold one image-tag token per image; subclasses that render their own
        conversation format call this to finish the common part. In the loader, when the
        lengths are known from the image sizes, the pixels are left to :meth:`complete_samples`
        (a :class:`PendingImagesSample` is returned). ``processed``: the ``(processor output,
        pixel values)`` of :meth:`process_images` when the caller has them already (they are
        not processed twice, nor deferred).
        """
        plan = (self.plan_images(images) if images and processed is None and self._defer_images()
                else None)
        if plan is not None:
            pixel_values = None
            counts, grid = plan
        else:
            output, pixel_values = processed if processed is not None else self.process_images(images)
            grid = _get(output, "image_grid_thw") if output is not None else None
            counts = self.image_token_counts(output, len(images))
        ids, labels, runs = expand_image_tokens(
            ids,
            labels,
            text_id=self.image_text_id,
            model_id=self.image_token_id,
            counts=counts,
            ignore_index=self.ignore_index,
        )
        truncated = False
        kept_images = len(images)
        if len(ids) > self.seq_length:
            ids, labels, kept_images = self.truncate(sample, ids, labels, runs)
            truncated = True
            if kept_images < len(images) and plan is not None:
                grid = grid[:kept_images] if grid is not None and kept_images else None
            elif kept_images < len(images):
                pixel_values, grid = _keep_images(pixel_values, grid, kept_images)
        if labels.count(self.ignore_index) == len(labels):
            raise CountedSkip(
                "no_label_tokens" if not truncated else "truncated_no_labels",
                f"sample {sample.__key__!r} has no label tokens left",
            )
        # list -> int64 via numpy: a C loop, about 3.5x faster than torch.tensor(list).
        input_ids = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        label_t = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        pending = {}
        cls = EncodedSample
        if plan is not None and kept_images:
            cls, pending = PendingImagesSample, {"pending_images": list(images[:kept_images])}
        return cls.derive_from(
            sample,
            **pending,
            input_ids=input_ids,
            labels=label_t,
            loss_mask=(label_t != self.ignore_index).to(torch.float32),
            pixel_values=pixel_values,
            image_grid_thw=grid,
            num_images=kept_images,
            seq_lengths=[len(ids)],
            truncated=truncated,
            image_token_counts=counts[:kept_images],
        )

    def truncate(
        self, sample: Any, ids: list[int], labels: list[int], runs: list[tuple[int, int]]
    ) -> tuple[list[int], list[int], int]:
        """Apply the ``truncation`` option; return the cut ids and labels and images kept.

        ``runs`` are the ``(start, end)`` spans of the image-token runs: a cut never splits one.
        """
        mode = self.options.truncation
        message = f"sample {sample.__key__!r} has {len(ids)} tokens > seq_length {self.seq_length}"
        if mode == "drop":
            raise CountedSkip("too_long", message, deliberate=True)
        if mode == "error":
            raise FatalSampleError(message + " (truncation='error')")
        cut = self.seq_length
        for start, end in runs:
            if start < cut < end:
                cut = start  # never leave part of an image
                break
        kept = sum(1 for _, end in runs if end <= cut)
        return ids[:cut], labels[:cut], kept


def _finished(sample: PendingImagesSample, pixels: torch.Tensor, grid: Any) -> EncodedSample:
    """``sample`` as a plain :class:`EncodedSample` with its processed pixels."""
    return EncodedSample.derive_from(
        sample,
        input_ids=sample.input_ids,
        labels=sample.labels,
        loss_mask=sample.loss_mask,
        pixel_values=pixels,
        image_grid_thw=grid,
        num_images=sample.num_images,
        seq_lengths=sample.seq_lengths,
        truncated=sample.truncated,
        visual=sample.visual,
        token_fields=sample.token_fields,
        image_token_counts=sample.image_token_counts,
    )


def _is_image(item: Any) -> bool:
    """An image in an interleaved sequence: a tensor, an array, a PIL image or encoded bytes."""
    return isinstance(item, (torch.Tensor, np.ndarray, bytes, bytearray, memoryview)) or (
        type(item).__module__.startswith("PIL.")
    )


def _get(mapping: Any, key: str) -> Any:
    if mapping is None:
        return None
    try:
        return mapping[key]
    except (KeyError, TypeError):
        return getattr(mapping, key, None)


def _keep_images(pixel_values: Any, grid: Any, kept: int) -> tuple[Any, Any]:
    """Keep the first ``kept`` images' pixel values (and grids)."""
    if kept == 0:
        return None, None
    if grid is not None:
        patches = int(grid[:kept].prod(dim=-1).sum())
        return pixel_values[:patches], grid[:kept]
    return pixel_values[:kept], None


def build_multimodal_task_encoder(
    options: MultimodalOptions | None, context: BuildContext
) -> MultimodalTaskEncoder:
    """Factory of the built-in ``multimodal`` task encoder (``factory(options, context)``)."""
    return MultimodalTaskEncoder(context, options)
