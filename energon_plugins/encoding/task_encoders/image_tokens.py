"""Images of the ``multimodal`` task encoder: processing, image-token counts, deferral, finishing.

:class:`ImageTokensMixin` holds the image half of
:class:`~energon_plugins.encoding.task_encoders.multimodal.MultimodalTaskEncoder` (and of the
plugin encoders built on it):

- :meth:`~ImageTokensMixin.process_images` and :meth:`~ImageTokensMixin.image_token_counts`:
  one processor call and the embeddings per image its output implies (``image_grid_thw``, the
  ``pixel_values`` shape, or the ``image_tokens`` option);
- :meth:`~ImageTokensMixin.plan_images`: the same counts from the image sizes alone, so that
  the loader's encoding stage can leave the pixels to :meth:`~ImageTokensMixin.complete_samples`
  (a :class:`~energon_plugins.encoding.samples.PendingImagesSample`);
- :meth:`~ImageTokensMixin.finish_sample` and :meth:`~ImageTokensMixin.truncate`: image tags
  expanded to image tokens, the ``truncation`` option applied (never inside an image), the
  :class:`~energon_plugins.encoding.samples.EncodedSample` built.
"""

from typing import Any

import numpy as np
import torch
from megatron.energon.errors import FatalSampleError

from energon_plugins.encoding.chat.conversation import expand_image_tokens
from energon_plugins.encoding.image_processors.inputs import image_height_width
from energon_plugins.encoding.samples import EncodedSample, PendingImagesSample
from energon_plugins.encoding.skips import CountedSkip


class ImageTokensMixin:
    """The image half of the multimodal task encoder (mixed in before ``PluginTaskEncoder``).

    Uses the encoder's ``options`` (``image_tokens``, ``merge_size``, ``patch_size``,
    ``truncation``), ``image_processor``, ``seq_length``, ``ignore_index``, ``image_text_id``
    (the image tag's token) and ``image_token_id`` (the model's image token), and
    ``_deferring`` (set while the loader's encoding stage runs).
    """

    options: Any
    image_processor: Any
    seq_length: int
    ignore_index: int
    image_text_id: int
    image_token_id: int
    _deferring: bool

    def image_token_counts(self, processed: Any, num_images: int) -> list[int]:
        """Image embeddings per image implied by the processor output (or the option).

        A tiling processor (its output's ``num_patches`` gives the tiles of each image) gives
        each image its tiles times the embeddings of one tile (``image_tokens``, else from the
        tiles' pixel size)."""
        if num_images == 0:
            return []
        tiles = tile_counts(processed)
        if tiles is not None:
            return self._tiled_counts(processed, tiles, num_images)
        if self.options.image_tokens is not None:
            return [self.options.image_tokens] * num_images
        grid = _get(processed, "image_grid_thw")
        if grid is not None:
            merge = self.options.merge_size or int(getattr(self.image_processor, "merge_size", None) or 1)
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
            raise ValueError(f"the image processor returned {len(counts)} images for {num_images} inputs")
        return counts

    def _tiled_counts(self, processed: Any, tiles: list[int], num_images: int) -> list[int]:
        if len(tiles) != num_images:
            raise ValueError(
                f"the image processor returned tiles of {len(tiles)} images for {num_images} inputs"
            )
        per_tile = self.options.image_tokens
        if per_tile is None:
            pixels = _get(processed, "pixel_values")
            if pixels is None or pixels.dim() != 4:
                raise ValueError("cannot derive image tokens of the tiles: pixel_values is not (N, C, H, W)")
            patch = self.options.patch_size
            per_tile = (int(pixels.shape[-2]) // patch) * (int(pixels.shape[-1]) // patch)
        return [per_tile * n for n in tiles]

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
        sizes = [image_height_width(img) for img in images]
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
        pending = [
            (s, s.pending_images) for s in samples if isinstance(s, PendingImagesSample) and s.pending_images
        ]
        if not pending:
            return samples, None
        images = [img for _, own_images in pending for img in own_images]
        processed, pixels = self.process_images(images)
        grid = _get(processed, "image_grid_thw")
        counts = self.image_token_counts(processed, len(images))
        done: dict[int, EncodedSample] = {}
        image = row = 0
        for sample, own_images in pending:
            n = len(own_images)
            own_grid = grid[image : image + n] if grid is not None else None
            rows = int(own_grid.prod(dim=-1).sum()) if own_grid is not None else n
            self._check_plan(sample, counts[image : image + n], own_grid)
            done[id(sample)] = _finished(sample, pixels[row : row + rows], own_grid)
            image, row = image + n, row + rows
        out = [done.get(id(s), s) for s in samples]
        all_pending = all(id(s) in done or s.pixel_values is None for s in samples) and row == int(
            pixels.shape[0]
        )
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
        # a processor without a pixel_values tensor stops the loader, naming its plugin
        return out, self.check_image_output(out, len(images))  # type: ignore[attr-defined]

    def finish_sample(
        self,
        sample: Any,
        ids: list[int],
        labels: list[int],
        images: list[torch.Tensor],
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
        plan = self.plan_images(images) if images and processed is None and self._defer_images() else None
        tiles: list[int] | None = None  # the tiles of each image, for a tiling processor
        if plan is not None:
            pixel_values = None
            counts, grid = plan
        else:
            output, pixel_values = processed if processed is not None else self.process_images(images)
            grid = _get(output, "image_grid_thw") if output is not None else None
            counts = self.image_token_counts(output, len(images))
            tiles = tile_counts(output)
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
        if len(ids) > self.seq_length and self.options.truncation != "split":  # split: packing cuts
            ids, labels, kept_images = self.truncate(sample, ids, labels, runs)
            truncated = True
            if kept_images < len(images) and plan is not None:
                grid = grid[:kept_images] if grid is not None and kept_images else None
            elif kept_images < len(images) and tiles is not None:
                pixel_values = (
                    pixel_values[: sum(tiles[:kept_images])]
                    if kept_images and pixel_values is not None
                    else None
                )
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
            visual={"num_patches": torch.tensor(tiles[:kept_images], dtype=torch.long)}
            if tiles and kept_images
            else None,
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


def tile_counts(processed: Any) -> list[int] | None:
    """The tiles of each image of a tiling processor's output (its ``num_patches``), else None."""
    tiles = _get(processed, "num_patches")
    if tiles is None:
        return None
    return [int(n) for n in (tiles.tolist() if hasattr(tiles, "tolist") else tiles)]


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
