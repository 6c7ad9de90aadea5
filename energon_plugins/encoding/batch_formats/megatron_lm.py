"""The ``megatron-lm`` batch format: what ``examples/multimodal/train.py`` ``get_batch`` reads.

``get_batch`` broadcasts, with fixed dtypes: ``tokens`` int64, ``labels`` int64, ``imgs``
float32, ``num_tiles``, ``cu_lengths`` and ``max_lengths`` int32. It then shifts the labels
itself (``labels[:, 1:L + 1]``, so they come one column wider and unshifted), masks the
targets equal to ``-100`` or the tokenizer's pad id, treats ``imgs`` of shape ``[1, 1]`` as
"no image", and builds THD ``PackedSeqParams`` from ``cu_lengths[0]`` / ``max_lengths[0]``
unless they are the ``[[0]]`` dummies (packing needs micro batch 1). ``LLaVAModel`` expands
each image token of ``tokens`` into that image's ``num_tiles * img_seq_len`` embeddings, so
each image takes one token here: the task encoder's run of expanded tokens is collapsed.
"""

from typing import Any

import torch

from energon_plugins.encoding.batch_formats.base import BatchFormat, row_keys
from energon_plugins.encoding.batch_formats.labels import (
    IGNORE_INDEX,
    aligned_targets,
    laid_out_offsets,
    segment_starts,
)
from energon_plugins.encoding.batch_formats.options import MegatronLMOptions
from energon_plugins.encoding.samples import MultiModalBatch

#: ``visual`` keys that give the number of tiles of each image (4-D ``pixel_values`` of tiles).
TILE_COUNT_KEYS = ("num_tiles", "num_patches")


class MegatronLMFormat(BatchFormat):
    """The dict Megatron-LM's ``get_batch`` reads (see the module docstring).

    Keys (``B`` rows; ``Lc`` the longest row once each image is one token):

    - ``tokens``: int64 ``(B, Lc)``, one image token per image (:attr:`image_token_id`);
    - ``labels``: int64 ``(B, Lc + 1)``, unshifted: ``labels[i]`` is the target of token ``i``
      itself, ``-100`` where the loss is off, on image tokens and at every sub-sequence start;
      ``get_batch``'s shift makes them next-token targets;
    - ``imgs``: float32 ``(sum(num_tiles), C, H, W)``, or the ``[1, 1]`` dummy for text only;
    - ``num_tiles``: int32 ``(N,)`` tiles per image, or the ``[[0]]`` dummy;
    - ``cu_lengths``: int32 ``[1, n + 1]`` sub-sequence offsets counted in the model's
      embeddings (each image as its expanded tokens), and ``max_lengths`` int32 ``[1]``, for a
      packed batch; the ``[[0]]`` dummies otherwise;
    - ``__keys__``: the ``__key__`` of every row.

    Raises:
        BatchFormatError: pixel values that are not images or tiles (``(P, D)`` patches of
            Qwen-style processors), packed batches of several rows, image tokens that do not
            match the images.
    """

    name = "megatron-lm"

    def __init__(self, context: Any = None, options: MegatronLMOptions | None = None) -> None:
        super().__init__(context, options if options is not None else MegatronLMOptions())
        self._source_id: int | None = self.options.source_image_token_id

    # ------------------------------------------------------------------ image tokens
    @property
    def source_image_token_id(self) -> int:
        """The image token the task encoder repeated (option, else from the context)."""
        if self._source_id is None:
            from energon_plugins.encoding.sample_config import MultiModalSampleConfig
            from energon_plugins.encoding.task_encoders.conversation import (
                resolve_image_token_ids,
            )

            config = self.context.sample_config or MultiModalSampleConfig()
            try:
                self._source_id = resolve_image_token_ids(self.context.tokenizer, config)[1]
            except Exception as exc:  # noqa: BLE001 - re-raised naming the option
                raise self.refuse(
                    f"cannot tell which token marks the images ({exc}); set the option "
                    "source_image_token_id"
                ) from exc
        return self._source_id

    @property
    def image_token_id(self) -> int:
        """The token written once per image (option, else :attr:`source_image_token_id`)."""
        written = self.options.image_token_id
        return self.source_image_token_id if written is None else written

    # ------------------------------------------------------------------ the batch
    def format(self, batch: MultiModalBatch) -> dict[str, Any]:
        """The ``get_batch`` dict of ``batch``."""
        rows = int(batch.input_ids.shape[0])
        packed = batch.packed_seq_params is not None
        if packed and rows != 1:
            raise self.refuse(
                f"a packed batch has {rows} rows; Megatron-LM's get_batch packs only with "
                "micro_batch_size 1"
            )
        imgs, num_tiles = self._images(batch)
        targets = aligned_targets(batch, self.ignore_index)
        targets[segment_starts(batch)] = IGNORE_INDEX  # never a target across a boundary
        tokens, labels = self._collapse(batch, targets)
        if packed:
            offsets = laid_out_offsets(batch)
            cu_lengths = offsets.to(torch.int32).reshape(1, -1)
            max_lengths = (offsets[1:] - offsets[:-1]).max().to(torch.int32).reshape(1)
        else:
            cu_lengths = torch.zeros((1, 1), dtype=torch.int32)
            max_lengths = torch.zeros((1, 1), dtype=torch.int32)
        return {
            "tokens": tokens,
            "labels": labels,
            "imgs": imgs,
            "num_tiles": num_tiles,
            "cu_lengths": cu_lengths,
            "max_lengths": max_lengths,
            "__keys__": row_keys(batch),
        }

    def _images(self, batch: MultiModalBatch) -> tuple[torch.Tensor, torch.Tensor]:
        pixels = batch.pixel_values
        if pixels is None or pixels.numel() == 0:
            return torch.zeros((1, 1), dtype=torch.float32), torch.zeros((1, 1), dtype=torch.int32)
        images = int(batch.num_images.sum()) if batch.num_images is not None else None
        if pixels.dim() == 5:  # (N, tiles, C, H, W)
            tiles = torch.full((pixels.shape[0],), int(pixels.shape[1]), dtype=torch.int32)
            pixels = pixels.reshape(-1, *pixels.shape[2:])
        elif pixels.dim() == 4:  # (tiles, C, H, W): one tile per image unless told otherwise
            counts = next(
                (batch.visual[k] for k in TILE_COUNT_KEYS if batch.visual and k in batch.visual),
                None,
            )
            if counts is None:
                tiles = torch.ones(int(pixels.shape[0]), dtype=torch.int32)
            else:
                tiles = torch.as_tensor(counts).reshape(-1).to(torch.int32)
                if int(tiles.sum()) != int(pixels.shape[0]):
                    raise self.refuse(
                        f"the tiles per image ({tiles.tolist()}) do not add up to the "
                        f"{int(pixels.shape[0])} tiles of pixel_values"
                    )
        else:
            raise self.refuse(
                f"pixel_values of shape {tuple(pixels.shape)} are patches, not images or tiles "
                "(N, C, H, W); Megatron-LM's LLaVAModel takes whole image tiles (Qwen-style "
                "patch encoders need a format of their own)"
            )
        if images is not None and int(tiles.shape[0]) != images:
            raise self.refuse(
                f"pixel_values hold {int(tiles.shape[0])} images but the rows count {images}"
            )
        return pixels.to(torch.float32).contiguous(), tiles

    def _collapse(
        self, batch: MultiModalBatch, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each image's run of tokens -> one :attr:`image_token_id`; labels kept in step."""
        ids = batch.input_ids.to(torch.long)
        num_images = (
            batch.num_images.tolist() if batch.num_images is not None else [0] * ids.shape[0]
        )
        counts = batch.image_token_counts.tolist() if batch.image_token_counts is not None else None
        row_tokens, row_labels = [], []
        first = 0
        for row, n in enumerate(num_images):
            if not n:
                row_tokens.append(ids[row])
                row_labels.append(targets[row])
                continue
            mine = counts[first : first + n] if counts is not None else None
            first += n
            keep, heads = self._image_runs(ids[row], n, mine, row)
            tokens = ids[row].clone()
            tokens[heads] = self.image_token_id
            row_tokens.append(tokens[keep])
            row_labels.append(targets[row][keep])
        width = max(int(t.shape[0]) for t in row_tokens)
        tokens = torch.full((len(row_tokens), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(row_tokens), width + 1), IGNORE_INDEX, dtype=torch.long)
        for row, (t, lab) in enumerate(zip(row_tokens, row_labels, strict=True)):
            tokens[row, : t.shape[0]] = t
            labels[row, : lab.shape[0]] = lab
        return tokens, labels

    def _image_runs(
        self, ids: torch.Tensor, images: int, counts: list[int] | None, row: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(keep, heads)``: the positions kept, and each image's first (kept) position."""
        positions = (ids == self.source_image_token_id).nonzero().reshape(-1)
        if counts is None:  # one image per maximal run
            breaks = (positions[1:] - positions[:-1] != 1).nonzero().reshape(-1) + 1
            bounds = [0, *breaks.tolist(), int(positions.shape[0])]
            runs = list(zip(bounds[:-1], bounds[1:], strict=True)) if len(positions) else []
        else:
            ends = torch.tensor(counts).cumsum(0).tolist()
            runs = list(zip([0, *ends[:-1]], ends, strict=True))
        total = runs[-1][1] if runs else 0
        if len(runs) != images or total != int(positions.shape[0]):
            raise self.refuse(
                f"row {row} holds {images} image(s) but {int(positions.shape[0])} image tokens "
                f"(id {self.source_image_token_id}) in {len(runs)} run(s)"
                + (f" for token counts {counts}" if counts is not None else "")
            )
        keep = torch.ones(ids.shape[0], dtype=torch.bool)
        heads = []
        for start, end in runs:
            run = positions[start:end]
            if int(run[-1] - run[0]) != end - start - 1:
                raise self.refuse(f"row {row}: an image's tokens are not contiguous")
            keep[run[1:]] = False
            heads.append(int(run[0]))
        return keep, torch.tensor(heads, dtype=torch.long)


def build_megatron_lm_format(options: MegatronLMOptions | None, context: Any) -> MegatronLMFormat:
    """Factory of the built-in ``megatron-lm`` format (``factory(options, context)``)."""
    return MegatronLMFormat(context, options)
